// An exec's end ends everything it started, on a real daemon with real runc servers: a fork bomb
// that fills the server's pid limit under POST /exec (the same Commands path as the WebSocket
// exec and the MCP tool) is killed whole at its timeout — the server's pids.current back near
// zero within 2 s, the next exec works — and so is one under an SSH exec whose client leaves;
// what an exec that ended by itself left running in the background (a detached daemon) keeps
// running, and the exec's own cgroup is gone.

import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { until } from '../helpers/wait.js';
import { send, type Answer } from '../http/contract.js';
import { CLIENT_OPTS } from '../ssh/helpers/env.js';

const PIDS = 256;
let d: TestDaemon;
let rt: ContainerRuntime;
let id = '';
let key = '';
const work = mkdtempSync(join(tmpdir(), 'rbx-execkill-'));
const keyFile = join(work, 'key');

test.before(async () => {
  d = await startTestDaemon({
    hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 }, exec: { killGrace: '500ms' } },
    runtime: { pidsLimit: PIDS },
  });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  rt = d.daemon.runtime;
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
  writeFileSync(keyFile, created.json.ssh_private_key, { mode: 0o600 });
});
test.after(async () => {
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

const cgroup = (ctl: string) => `/sys/fs/cgroup/${ctl}/${d.cfg.runtime.nftTable}/${id}`;
/** Tasks the server's pids cgroup counts now (read on the host). */
const pids = () => Number(readFileSync(join(cgroup('pids'), 'pids.current'), 'utf8'));
const execCgroups = () => readdirSync(cgroup('freezer')).filter((n) => n.startsWith('exec-'));
const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms).unref())]);
const exec = (body: unknown): Promise<Answer> =>
  within(send(d.http, 'api.localhost', 'POST', `/servers/${id}/exec`, { headers: { authorization: `Bearer ${key}` }, body }), 60_000, 'exec');
/** A fork bomb, then its top process filling what is left with sleeps in sessions of their own
 *  (out of its process group) for as long as it runs. bash (unlike dash) outlives a failed fork:
 *  it says so and tries again. */
const BOMB = "bash -c 'b() { b | b & }; b; while :; do setsid sleep 600 & done'";

test('a fork bomb under exec with a 2 s timeout: timed_out, then the pids are free within 2 s and the next exec works', async () => {
  const before = pids();
  const r = await exec({ command: BOMB, timeout: 2 });
  const answered = Date.now();
  assert.is(r.status, 200, r.text);
  assert.is(r.json.timed_out, true, JSON.stringify({ ...r.json, stderr: r.json.stderr.slice(0, 300) }));
  assert.match(r.json.stderr, /fork: retry: Resource temporarily unavailable/, 'the bomb reached the pid limit');
  let last = pids();
  while (last > before + 3 && Date.now() - answered < 2000) {
    await new Promise((ok) => setTimeout(ok, 50));
    last = pids();
  }
  assert.ok(last <= before + 3, `pids.current ${last} 2 s after the timeout (before: ${before}, limit ${PIDS})`);
  assert.ok(r.json.ms < 2000 + 500 + 3000, `answered after ${r.json.ms} ms`);
  const next = await exec({ command: 'echo ok' });
  assert.is(next.json.stdout, 'ok\n', next.text);
  assert.equal(execCgroups(), [], "no exec's cgroup is left");
});

test('a fork bomb that ignores the hangup under an SSH exec whose client leaves is killed whole', async () => {
  const before = pids();
  assert.ok(before < 16, `${before} pids taken before the bomb`);
  // The hangup is ignored (by every process: it is inherited), so the top is still there after
  // the grace and everything is killed. (A session whose top ends at the hangup keeps, like sshd,
  // what it detached: see the last test.)
  const bomb = `trap '' HUP; ${BOMB}`;
  const client = spawn('ssh', ['-p', String(d.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS, 'root@127.0.0.1', bomb], { stdio: 'ignore' });
  try {
    await until('the bomb fills the pids', () => pids() >= PIDS - 8, 30_000, 50);
  } finally {
    client.kill('SIGKILL');
  }
  await until('the pids are free again', () => pids() <= before, 3000 + 2000, 50); // SSH's grace, then 2 s
  const next = await exec({ command: 'echo ok' });
  assert.is(next.json.stdout, 'ok\n', next.text);
  await until("the session's cgroup is removed", () => execCgroups().length === 0, 2000, 50);
});

test('what an exec that ended left running in the background keeps running; its cgroup is removed', async () => {
  const r = await exec({ command: 'setsid sleep 7001 </dev/null >/dev/null 2>&1 & echo started', timeout: 5 });
  assert.is(r.json.stdout, 'started\n', r.text);
  assert.is(r.json.timed_out, false);
  await until("the exec's cgroup is removed", () => execCgroups().length === 0, 2000, 50);
  const ps = await exec({ command: 'ps -eo args=' });
  assert.ok(ps.json.stdout.includes('sleep 7001'), ps.json.stdout);
});

test.run();
