// One daemon per set of host names (runtime/locks.ts) and servers whose network vanished
// (runtime/netwatch.ts), with real daemons, runc containers, bridges and nftables: a second daemon
// on the same names (or an overlapping uid range) refuses to start, naming the holder and the
// setting, and the first one's server keeps serving; daemons on different names run side by side
// through a restart; a veth deleted under a running server is wired again and the next request
// through the proxy is served; a deleted egress element is added again by the sweep.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { run } from '../helpers/run.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { until } from '../helpers/wait.js';
import { get } from '../proxy/helpers.js';
import { RUN_SH, sh } from './helpers/env.js';
import { AppError } from '../../src/errors.js';
import type { ContainerRuntime } from '../../src/runtime/index.js';
import { startDaemon, type Daemon } from '../../src/main.js';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/log/index.js';

const repo = new URL('../../', import.meta.url).pathname;
let a: TestDaemon;
let b: TestDaemon | undefined;
/** b's daemon after its restart (b.stop() would stop the first instance). */
let bAgain: Daemon | undefined;

interface Made {
  id: string;
  slug: string;
  body: string;
}

/** A server made through POST /create, serving `body` from its run.sh app on port 80. */
async function appServer(d: TestDaemon, body: string): Promise<Made> {
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const c = JSON.parse(r.text) as { id: string; subdomain: string };
  const w = await sh(
    d.daemon.runtime,
    c.id,
    `mkdir -p /root/www && echo -n '${body}' > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh`,
    RUN_SH,
  );
  assert.is(w.code, 0, w.err);
  return { id: c.id, slug: c.subdomain.split('.')[0], body };
}

/** The app's answer through the daemon's proxy (waits for the app to listen). */
async function served(d: TestDaemon, m: Made): Promise<string> {
  return until(`${m.slug} to serve`, async () => {
    const r = await get(d.http, `${m.slug}.localhost`, '/');
    return r.status === 200 && r.text;
  });
}

const crt = (d: TestDaemon) => d.daemon.runtime as ContainerRuntime;

const ownOf = (d: TestDaemon) => {
  const { bridge, nftTable, subnet, uidStart } = d.cfg.runtime;
  return { bridge, nftTable, subnet, uidStart };
};

test.before(async () => {
  a = await startTestDaemon({ publicIp: '127.0.0.1', hosting: { anonServersPerIp: 10, rateLimit: { createsPerIpPerHour: 1000 } } });
});

test.after(async () => {
  if (bAgain) {
    for (const s of bAgain.runtime.list()) await bAgain.runtime.delete(s.id).catch((e) => console.error('cleanup: delete failed', s.id, e));
    await bAgain.stop();
    await bAgain.runtime.net.teardown().catch((e) => console.error('cleanup: network teardown failed', e));
    rmSync(b!.dataDir, { recursive: true, force: true });
  } else await b?.stop();
  await a?.stop();
});

test('a second daemon on the same host names refuses to start, naming the holder and the setting; the first one keeps serving', async () => {
  const m = await appServer(a, 'first daemon app');
  assert.is(await served(a, m), m.body);
  const second = mkdtempSync(join(tmpdir(), 'rbx-second-'));
  const err = await startTestDaemon({ runtime: ownOf(a), dataDir: second }).then(
    (d) => d,
    (e: unknown) => e,
  );
  // refused before anything was made: no store, no generated CA, no lxcfs
  const left = readdirSync(second);
  rmSync(second, { recursive: true, force: true });
  assert.equal(left, [], `the refused daemon made ${left.join(', ')}`);
  if (!(err instanceof AppError)) {
    if (err && typeof (err as TestDaemon).stop === 'function') await (err as TestDaemon).daemon.stop(); // its network is a's: keep it
    assert.unreachable('the second daemon started on the first one’s names');
    return;
  }
  assert.is(err.code, 'host_names_taken');
  assert.match(err.message, `pid ${process.pid}`);
  assert.match(err.message, `runtime.bridge ${a.cfg.runtime.bridge}`);
  assert.match(err.message, `runtime.nftTable ${a.cfg.runtime.nftTable}`);
  assert.ok(existsSync(`/sys/class/net/${crt(a).net.vethOf(crt(a).get(m.id)!.ip)}`), 'the first daemon’s veth is still there');
  const r = await get(a.http, `${m.slug}.localhost`, '/');
  assert.is(r.status, 200, r.text);
  assert.is(r.text, m.body);

  // doctor, run with another data dir on the same names, names the daemon that holds them
  const { bridge, nftTable, subnet, uidStart } = ownOf(a);
  const env = {
    ...process.env,
    ROOTBOX_DATA_DIR: join(a.dataDir, 'other'),
    ROOTBOX_BRIDGE: bridge,
    ROOTBOX_NFT_TABLE: nftTable,
    ROOTBOX_SUBNET: subnet,
    ROOTBOX_UID_START: String(uidStart),
  };
  const doctor = await run(join(repo, 'bin', 'rootbox'), ['doctor'], { env });
  assert.match(
    doctor.stdout,
    new RegExp(
      `MISSING\\s+host names\\s+daemon pid ${process.pid} \\(data dir ${a.dataDir}\\) holds runtime\\.bridge ${bridge}, runtime\\.nftTable ${nftTable}`,
    ),
    doctor.stdout,
  );
});

test('an overlapping uid range alone is refused too, naming runtime.uidStart', async () => {
  const err = await startTestDaemon({ runtime: { bridge: 'rbl9', nftTable: 'rbl9', subnet: '10.196.9.0/24', uidStart: a.cfg.runtime.uidStart + 65536 } }).then(
    async (d) => (await d.stop(), undefined),
    (e: unknown) => e,
  );
  assert.instance(err, AppError);
  assert.is((err as AppError).code, 'host_names_taken');
  assert.match((err as AppError).message, 'runtime.uidStart');
  assert.not.match((err as AppError).message, 'runtime.bridge rbl9');
});

test('two daemons on different names run side by side: a restart of one leaves the other serving', async () => {
  b = await startTestDaemon({ publicIp: '127.0.0.1' });
  assert.is.not(b.cfg.runtime.bridge, a.cfg.runtime.bridge);
  const ma = await appServer(a, 'served by a');
  const mb = await appServer(b, 'served by b');
  assert.is(await served(a, ma), ma.body);
  assert.is(await served(b, mb), mb.body);
  // b stops (its containers keep running, as a production daemon's do) and starts again: its
  // reconcile adopts its own server and touches nothing of a's
  const { cfg } = b;
  await b.daemon.stop();
  const logs: Record<string, unknown>[] = [];
  bAgain = await startDaemon(cfg, createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) }));
  b = { ...b, daemon: bAgain, http: bAgain.edge.ports.http, https: bAgain.edge.ports.https, logs };
  assert.not.ok(
    logs.some((l) => l.msg === 'reconcile: removed network leftovers'),
    JSON.stringify(logs.find((l) => l.msg === 'reconcile: removed network leftovers')),
  );
  assert.is(await served(a, ma), ma.body);
  assert.is(await served(b, mb), mb.body);
  assert.ok(existsSync(`/sys/class/net/${crt(a).net.vethOf(crt(a).get(ma.id)!.ip)}`));
});

test('a veth deleted under a running server is wired again (logged) and the next request is served', async () => {
  const m = await appServer(a, 'still here');
  assert.is(await served(a, m), m.body);
  const veth = crt(a).net.vethOf(crt(a).get(m.id)!.ip);
  const before = a.logs.length;
  const del = await run('ip', ['link', 'del', veth]);
  assert.is(del.code, 0, del.stderr);
  const repaired = await until('the repair log line', () =>
    a.logs.slice(before).find((l) => l.msg === 'server network repaired' && l.server === m.id && l.veth === veth),
  );
  assert.is(repaired.how, 'rewired');
  const r = await get(a.http, `${m.slug}.localhost`, '/');
  assert.is(r.status, 200, r.text);
  assert.is(r.text, m.body);
});

test('an egress element deleted under a server is added again by the sweep (logged)', async () => {
  const [s] = crt(a).list();
  const { table } = crt(a).net;
  const del = await run('nft', ['delete', 'element', 'inet', table, 'egress', `{ ${s.ip} }`]);
  assert.is(del.code, 0, del.stderr);
  assert.not.ok((await crt(a).net.egressIps())?.has(s.ip));
  const before = a.logs.length;
  await crt(a).netWatch.sweep(); // what the 30 s timer runs
  assert.ok((await crt(a).net.egressIps())?.has(s.ip), 'the element is back');
  assert.ok(a.logs.slice(before).some((l) => l.msg === 'server network repaired' && l.server === s.id && l.how === 'egress element added'));
});

test.run();
