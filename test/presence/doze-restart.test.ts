// A doze outlives the daemon: the real daemon as a process (real runc servers running an app),
// SIGKILLed while its servers doze, then started again on the same data dir. The servers are
// still frozen (the cgroup freezer says FROZEN), the API shows them `sleeping`, the meter's entry
// spanning the crash bills them no RAM, and a request thaws them: the app process from before
// the crash answers, nothing was started again.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore, type LedgerEntry } from '../../src/store/index.js';
import { api } from '../hosting/helpers/killload.js';
import { cgroupsOf, ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get } from '../proxy/helpers.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { sshArgs } from '../ssh/helpers/env.js';
import { DOZE_APP_PY, DOZE_RUN_SH, fields } from './dozeapp.js';

// The first meter pass after the restart (within 1 s) comes well before the idle timeout: a
// server the restart thawed would be running, and billed as awake, when it is charged.
const IDLE = 4000;
let d: ProcDaemon;
const work = mkdtempSync(join(tmpdir(), 'rbx-doze-restart-'));

interface Box {
  id: string;
  key: string;
  slug: string;
  pid: number;
}

test.before(async () => {
  d = new ProcDaemon({
    config: {
      hosting: { anonServersPerIp: 3, rateLimit: { createsPerIpPerHour: 1000 } },
      proxy: { idleTimeout: IDLE, idleCheckInterval: 200, dozeTimeout: '1h', dozeMemoryFloor: 0, wakeTimeout: '20s' },
      billing: { meterInterval: '1s' },
    },
  });
  await d.start();
});
test.after(async () => {
  await d?.remove();
  rmSync(work, { recursive: true, force: true });
});

/** The cgroup freezer's own word on the server: FROZEN, THAWED (or FREEZING). */
function freezerState(id: string): string {
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const dir = cgroupsOf(d.table, id).find((p) => v2 || p.includes('/freezer/'));
  if (!dir) return 'no cgroup';
  if (v2) return /^frozen 1$/m.test(readFileSync(join(dir, 'cgroup.events'), 'utf8')) ? 'FROZEN' : 'THAWED';
  return readFileSync(join(dir, 'freezer.state'), 'utf8').trim();
}

const page = (b: Box, path: string) => get(d.http, `${b.slug}.localhost`, path);
const apiState = async (b: Box) => (await api(d.http, 'GET', `/servers/${b.id}`, { key: b.key })).body.state as string;

/** Usage entries of the server's account, read from the store (the daemon keeps running). */
async function ledger(id: string): Promise<LedgerEntry[]> {
  const store = openStore(d.dataDir);
  try {
    const acc = store.servers.get(id)!.accountId;
    return store.billing
      .entries(acc, 1000)
      .items.filter((e) => e.kind === 'usage' && e.serverId === id)
      .reverse();
  } finally {
    await store.close();
  }
}

async function createApp(): Promise<Box> {
  const r = await api(d.http, 'POST', '/create');
  assert.is(r.status, 200, JSON.stringify(r.body));
  const b: Box = { id: r.body.id, key: r.body.api_key, slug: String(r.body.subdomain).split('.')[0], pid: 0 };
  const keyFile = join(work, `${b.id}.key`);
  writeFileSync(keyFile, r.body.ssh_private_key, { mode: 0o600 });
  const w = await run('ssh', [...sshArgs(d.ssh, keyFile), `cat > /root/app.py && printf '%s' '${DOZE_RUN_SH}' > /root/run.sh && chmod +x /root/run.sh`], {
    input: DOZE_APP_PY,
    timeoutMs: 60_000,
  });
  assert.is(w.code, 0, w.stderr);
  await until(
    'the app answers',
    async () => {
      const p = await page(b, '/up').catch(() => undefined);
      return !!p?.text.startsWith('pid=');
    },
    30_000,
  );
  b.pid = fields((await page(b, '/before')).text).pid;
  return b;
}

test('servers dozing when the daemon is SIGKILLed still doze after its restart: frozen, shown sleeping, no RAM billed across the crash, thawed by a request', async () => {
  const boxes = [await createApp(), await createApp()];
  for (const b of boxes) {
    await until('the server dozes', async () => freezerState(b.id) === 'FROZEN' && (await apiState(b)) === 'sleeping', IDLE + 15_000);
  }
  const dozedAt = Date.now();
  // the meter has charged a period of the doze: its cursor is inside it
  for (const b of boxes) await until('a charge during the doze', async () => (await ledger(b.id)).some((e) => e.to > dozedAt), 10_000, 200);

  await d.kill();
  const killedAt = Date.now();
  await d.start();
  const restartedAt = Date.now();

  for (const b of boxes) {
    assert.is(freezerState(b.id), 'FROZEN', `${b.id}: the restart left its processes frozen`);
    assert.is(await apiState(b), 'sleeping', `${b.id}: shown sleeping after the restart`);
  }
  const spans: LedgerEntry[] = [];
  for (const b of boxes) {
    let span: LedgerEntry | undefined;
    await until(
      'the charge of the period spanning the crash',
      async () => !!(span = (await ledger(b.id)).find((e) => e.from < killedAt && e.to > restartedAt)),
      10_000,
      200,
    );
    spans.push(span!);
    assert.is(span!.ramGbHours, 0, `${b.id}: RAM billed for ${span!.to - span!.from} ms frozen across the crash`);
    assert.ok(span!.diskGbMonths > 0, 'its disk is billed');
    assert.is(freezerState(b.id), 'FROZEN', 'still frozen when charged');
  }

  for (const b of boxes) {
    const t0 = performance.now();
    const r = await page(b, '/after');
    const ms = performance.now() - t0;
    assert.is(r.status, 200, r.text);
    assert.is(fields(r.text).pid, b.pid, 'the app process from before the crash answers: thawed, not started again');
    assert.is(freezerState(b.id), 'THAWED');
    assert.is(await apiState(b), 'running');
    console.log(
      `   (${b.id}: request → answer after the restart ${ms.toFixed(1)} ms; crash-spanning charge ${spans[boxes.indexOf(b)].to - spans[boxes.indexOf(b)].from} ms, RAM 0)`,
    );
  }
  assert.ok(d.current().some((l) => l.msg === 'server dozes (frozen before this start)'));
  // a thaw is logged once the answer it was for is out (presence/idle.ts)
  await until('the thaw is logged', () => d.current().some((l) => l.msg === 'server thawed'), 2000, 5);
  assert.not.ok(
    d.current().some((l) => l.msg === 'server woke'),
    'nothing was started',
  );
});

test.run();
