// Parked sleep (runtime.parkOnSleep), with real runc servers: a stop makes the container again at
// once and leaves it `created` (runc init waiting on exec.fifo, no user process, no RAM billed), so
// a wake is the fifo open and the app's start; the memory floor (IdleTracker.checkFloor) and
// unpark() remove parked containers least recently parked first; delete leaves nothing; a new
// runtime instance adopts a parked container (the same init) or, when its bundle changed, parks
// anew; a resize parks again with the new limit; a stop for the memory floor parks nothing; a
// parked init that died is replaced by a cold start. With parking off a sleeping server
// has no container at all.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cgroupDirs } from '../../src/runtime/cgroup.js';
import { alive } from '../../src/runtime/proc.js';
import { silentLogger } from '../../src/log/index.js';
import { IdleTracker } from '../../src/presence/index.js';
import { httpGet, MiB, newId, RUN_SH, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const a = newId('pa');
const b = newId('pb');
const ips: Record<string, string> = {};

async function serve(id: string, slug: string, text: string): Promise<void> {
  ips[id] = (await env.rt.create({ id, slug, memoryBytes: 128 * MiB, diskBytes: 160 * MiB })).ip;
  const w = await sh(env.rt, id, `mkdir -p /root/www && echo ${text} > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh`, RUN_SH);
  assert.is(w.code, 0, w.err);
  assert.is(await waitFor(() => httpGet(ips[id]), 10_000), `${text}\n`);
}

const procsOf = (id: string): string[] => {
  const dirs = cgroupDirs(env.rt.cgroup(id));
  const d = dirs.find((x) => x.includes('/pids/')) ?? dirs[0];
  return d ? readFileSync(join(d, 'cgroup.procs'), 'utf8').trim().split('\n').filter(Boolean) : [];
};

test.before(async () => {
  env = await startRuntime('park', 57);
  await serve(a, 'park-a', 'pa');
  await serve(b, 'park-b', 'pb');
});
test.after(async () => {
  await env?.cleanup();
});

test('a stopped server is parked: its container created, only the waiting init in its cgroup, nothing billed, exec refused', async () => {
  await env.rt.stop(a);
  assert.is(env.rt.get(a)?.state, 'sleeping');
  const st = await env.rt.runc.state(a);
  assert.is(st?.status, 'created');
  assert.equal(procsOf(a), [String(st!.pid)], 'no user process');
  assert.is(env.rt.runc.createdInit(a), st!.pid);
  assert.is((await env.rt.stats(a)).memoryBytes, 0);
  assert.throws(() => env.rt.exec(a, { argv: ['true'] }), /wake it first/);
  assert.equal(
    env.rt.parked().map((p) => p.id),
    [a],
  );
  assert.ok(env.rt.parked()[0].memoryBytes > 0, 'the floor sees what the parked init holds');
  assert.is(await httpGet(ips[a], 80, 300), null, 'nothing listens while parked');
});

test('a parked server wakes through its exec fifo alone (no runc process, no mount or namespace step) and serves', async () => {
  const pid = (await env.rt.runc.state(a))!.pid;
  const steps: string[] = [];
  env.rt.trace = (step) => steps.push(step);
  try {
    await env.rt.start(a);
  } finally {
    env.rt.trace = undefined;
  }
  assert.equal(steps, ['store (beside runc)', 'runc start (parked)']);
  assert.is(env.rt.get(a)?.state, 'running');
  const st = await env.rt.runc.state(a);
  assert.is(st?.status, 'running');
  assert.is(st?.pid, pid, 'the parked init became the server init');
  assert.is(await waitFor(() => httpGet(ips[a]), 10_000), 'pa\n');
  assert.equal(env.rt.parked(), [], 'no longer parked');
  assert.is(env.store.runtime.get(a)?.desired, 'running');
});

test('a parked init that died is replaced: the wake makes the container anew and serves', async () => {
  await env.rt.stop(a);
  const pid = (await env.rt.runc.state(a))!.pid;
  process.kill(pid, 'SIGKILL');
  await waitFor(async () => (alive(pid) ? null : true), 3000);
  await env.rt.start(a);
  assert.is(await waitFor(() => httpGet(ips[a]), 10_000), 'pa\n');
  assert.is.not((await env.rt.runc.state(a))?.pid, pid);
});

test('the memory floor removes parked containers least recently parked first, only as many as it needs; they wake cold', async () => {
  await env.rt.stop(b); // parked first
  await new Promise((r) => setTimeout(r, 20));
  await env.rt.stop(a);
  assert.equal(
    env.rt
      .parked()
      .map((p) => p.id)
      .sort(),
    [a, b].sort(),
  );
  const tracker = new IdleTracker({
    runtime: env.rt,
    neverSleep: () => false,
    idleTimeout: 3_600_000,
    checkInterval: 3_600_000,
    memoryFloor: 1024 * MiB,
    memAvailable: () => 1024 * MiB - 1, // one byte missing: one parked container goes
    log: silentLogger,
  });
  tracker.checkFloor();
  assert.ok(await waitFor(async () => (await env.rt.runc.state(b)) === undefined, 5000), 'the container of b is deleted');
  assert.equal(
    env.rt.parked().map((p) => p.id),
    [a],
    'the least recently parked went',
  );
  assert.is(cgroupDirs(env.rt.cgroup(b)).length, 0, 'no cgroup');
  assert.is(env.rt.get(b)?.state, 'sleeping');
  await env.rt.start(b);
  assert.is(await waitFor(() => httpGet(ips[b]), 10_000), 'pb\n');
  assert.is(await env.rt.unpark(b), false, 'an awake server is not unparked');
});

test('a new runtime instance adopts a parked container as it is, and parks anew one made from another bundle', async () => {
  const pid = (await env.rt.runc.state(a))!.pid;
  const rt2 = await env.restart();
  assert.is(rt2.get(a)?.state, 'sleeping');
  assert.is((await rt2.runc.state(a))?.pid, pid, 'the same waiting init');
  assert.equal(
    rt2.parked().map((p) => p.id),
    [a],
  );
  // a bundle that differs from what this daemon writes (an upgrade changed the spec)
  const file = join(rt2.serverDir(a), 'bundle', 'config.json');
  const spec = JSON.parse(readFileSync(file, 'utf8'));
  spec.process.env.push('OLD=1');
  writeFileSync(file, JSON.stringify(spec));
  const rt3 = await env.restart();
  const st = await rt3.runc.state(a);
  assert.is(st?.status, 'created', 'parked again');
  assert.is.not(st?.pid, pid, 'from the bundle as written now');
  assert.not.ok(existsSync(`/proc/${pid}`) && alive(pid), 'the old init is gone');
  await rt3.start(a);
  assert.is(await waitFor(() => httpGet(ips[a]), 10_000), 'pa\n');
});

test('a resize of a parked server parks it again with the new memory limit', async () => {
  await env.rt.stop(a);
  const before = (await env.rt.runc.state(a))!.pid;
  await env.rt.resize(a, { memoryBytes: 192 * MiB, diskBytes: 160 * MiB });
  const st = await env.rt.runc.state(a);
  assert.is(st?.status, 'created');
  assert.is.not(st?.pid, before);
  const mem = cgroupDirs(env.rt.cgroup(a)).find((d) => d.includes('/memory/'));
  const limit = Number(readFileSync(mem ? join(mem, 'memory.limit_in_bytes') : join(cgroupDirs(env.rt.cgroup(a))[0], 'memory.max'), 'utf8'));
  assert.is(limit, 192 * MiB);
  assert.is(env.rt.get(a)?.state, 'sleeping');
});

test('a stop for the memory floor (park: false) parks nothing', async () => {
  await env.rt.start(a);
  await env.rt.stop(a, { park: false });
  assert.is(env.rt.get(a)?.state, 'sleeping');
  assert.is(await env.rt.runc.state(a), undefined);
  assert.is(cgroupDirs(env.rt.cgroup(a)).length, 0);
  assert.equal(env.rt.parked(), []);
  await env.rt.start(a);
});

test('delete of a parked server leaves no container, cgroup or process', async () => {
  await env.rt.stop(a);
  const pid = (await env.rt.runc.state(a))!.pid;
  await env.rt.delete(a);
  assert.is(await env.rt.runc.state(a), undefined);
  assert.is(cgroupDirs(env.rt.cgroup(a)).length, 0);
  assert.not.ok(alive(pid));
  assert.equal(env.rt.parked(), []);
});

test('with parkOnSleep off a sleeping server has no container and no cgroup', async () => {
  const off = await startRuntime('park-off', 58, { parkOnSleep: 'off' });
  try {
    const id = newId('po');
    await off.rt.create({ id, slug: 'park-off', memoryBytes: 128 * MiB, diskBytes: 160 * MiB });
    await off.rt.stop(id);
    assert.is(await off.rt.runc.state(id), undefined);
    assert.is(cgroupDirs(env.rt.cgroup(id)).length, 0);
    assert.equal(off.rt.parked(), []);
    await off.rt.start(id);
    assert.is((await off.rt.runc.state(id))?.status, 'running');
  } finally {
    await off.cleanup();
  }
});

test.run();
