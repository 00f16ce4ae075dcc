// GET /servers/{id}/logs on a real daemon with real runc servers: run.sh's output and the
// supervisor's events, a memory hog's OOM kill (the endpoint's count and the line in the server's
// /var/log/rootbox.log), a sleeping server read without waking it, and a user's symlinks never
// followed out of the server's root.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { send } from '../http/contract.js';
import { sh, waitFor } from '../runtime/helpers/env.js';

let d: TestDaemon;
let rt: ContainerRuntime;
let id = '';
let key = '';
const secretDir = mkdtempSync(join(tmpdir(), 'rbx-logs-secret-'));
const SECRET = `host-secret-${process.pid}`;

test.before(async () => {
  d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 6000 } } });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  rt = d.daemon.runtime;
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
  writeFileSync(join(secretDir, 'run.sh.log'), `${SECRET}\n`);
});
test.after(async () => {
  await d?.stop();
  rmSync(secretDir, { recursive: true, force: true });
});

interface Logs {
  lines: string[];
  events: { kind: string; source: string; status?: number; in_seconds?: number; message: string }[];
  oom_kills: number;
}
const logs = async (q = ''): Promise<Logs> => {
  const a = await send(d.http, 'api.localhost', 'GET', `/servers/${id}/logs${q}`, { headers: { authorization: `Bearer ${key}` } });
  assert.is(a.status, 200, a.text);
  return a.json;
};
const inside = async (script: string) => {
  const r = await sh(rt, id, script);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out;
};

test("logs show run.sh output and the supervisor's started, exited with status and restarting events; tail limits the lines", async () => {
  await inside(
    'printf "#!/bin/bash\\nfor i in 1 2 3; do echo line-\\$i; done\\nexit 3\\n" > /root/run.sh.new && chmod +x /root/run.sh.new && mv /root/run.sh.new /root/run.sh',
  );
  const got = await waitFor(async () => {
    const l = await logs();
    return l.events.some((e) => e.kind === 'restarting') ? l : null;
  }, 15_000);
  assert.ok(got, 'a restarting event within 15 s');
  assert.ok(got.lines.includes('line-3'), got.lines.join('\n'));
  const kinds = got.events.map((e) => e.kind);
  assert.ok(kinds.includes('started') && kinds.includes('exited'), kinds.join(','));
  assert.is(got.events.find((e) => e.kind === 'exited')!.status, 3);
  assert.ok(got.events.find((e) => e.kind === 'restarting')!.in_seconds! > 0);
  assert.is(got.oom_kills, 0);
  const one = await logs('?tail=1');
  assert.is(one.lines.length, 1);
  assert.ok(one.events.length <= 1);
  await inside('rm -f /root/run.sh');
});

test('a memory hog killed by the kernel is counted by the logs endpoint and told in /var/log/rootbox.log inside the server', async () => {
  const hog = rt.exec(id, { argv: ['python3', '-c', 'a = []\nwhile True: a.append(bytearray(8 << 20))'] });
  hog.stdin.end();
  const end = await hog.exited;
  assert.ok(end.signal === 'SIGKILL' || end.code === 137, `the hog ends by SIGKILL: ${JSON.stringify(end)}`);
  const got = await waitFor(async () => {
    const l = await logs();
    return l.oom_kills >= 1 ? l : null;
  }, 10_000);
  assert.ok(got, 'oom_kills counted within 10 s');
  const ev = got.events.find((e) => e.kind === 'oom_kill');
  assert.ok(ev && ev.source === 'rootbox', JSON.stringify(got.events));
  assert.match(ev.message, /the kernel killed python3 \(uid 0\).*256 MiB/);
  const line = await inside('cat /var/log/rootbox.log; stat -c %u /var/log/rootbox.log');
  assert.match(line, /^\[rootbox [^\]]+\] out of memory: the kernel killed python3/m);
  assert.match(line, /\n0\n$/, "the file belongs to the server's root");
});

test('a run.sh killed for memory is told by the supervisor: exited with status 137 (out of memory)', async () => {
  await inside(
    `printf '#!/bin/bash\\nexec python3 -c "a = []\\nwhile True: a.append(bytearray(8 << 20))"\\n' > /root/run.sh.new && chmod +x /root/run.sh.new && mv /root/run.sh.new /root/run.sh`,
  );
  const ev = await waitFor(async () => (await logs()).events.find((e) => e.kind === 'exited' && /out of memory/.test(e.message)) ?? null, 15_000);
  await inside('rm -f /root/run.sh');
  assert.ok(ev, 'the supervisor said why run.sh ended');
  assert.is(ev.status, 137);
});

test("a user's symlinks are never followed out of the server: a linked run.sh.log or /var/log read as absent", async () => {
  await inside(`mv /var/log/run.sh.log /var/log/run.sh.log.real; ln -s ${secretDir}/run.sh.log /var/log/run.sh.log`);
  let l = await logs();
  assert.not.ok(
    l.lines.some((x) => x.includes(SECRET)),
    'a file outside the root was read',
  );
  await inside(`rm /var/log/run.sh.log; mv /var/log /var/log.real; ln -s ${secretDir} /var/log`);
  l = await logs();
  assert.not.ok(
    l.lines.some((x) => x.includes(SECRET)),
    'a directory outside the root was read',
  );
  assert.is(l.oom_kills, 0, 'rootbox.log behind a linked /var/log is not read');
  await inside('rm /var/log; mv /var/log.real /var/log; mv /var/log/run.sh.log.real /var/log/run.sh.log');
  assert.ok((await logs()).oom_kills >= 1);
});

test('reading the logs of a sleeping server does not wake it', async () => {
  await rt.stop(id);
  assert.is(rt.get(id)?.state, 'sleeping');
  const l = await logs('?tail=1000');
  assert.ok(l.lines.includes('line-3'));
  assert.ok(l.oom_kills >= 1);
  await new Promise((r) => setTimeout(r, 300));
  assert.is(rt.get(id)?.state, 'sleeping');
  assert.not.ok(['running', 'paused'].includes((await rt.runc.state(id))?.status ?? 'none'), 'no container was started (at most parked: created)');
});

test.run();
