// The stop of a frozen server without a grace (runtime/halt.ts) on a real cgroup of its own (root,
// no runc: the test's Runc fails its kill, as runc does when it cannot signal the container): the
// frozen process is killed where it stands through its cgroup (cgroup.kill on v2, else each of its
// processes) and never runs
// again — it is not thawed while its SIGKILL was not sent.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freeze, thaw } from '../../src/runtime/freezer.js';
import { haltContainer } from '../../src/runtime/halt.js';
import type { Runc } from '../../src/runtime/runc.js';
import { cgroupPath } from '../../src/runtime/spec.js';
import { until } from '../helpers/wait.js';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));
const id = `halt-test-${process.pid}`;
const dir = V2 ? join(ROOT, cgroupPath(id)) : join(ROOT, 'freezer', cgroupPath(id));
let child: ChildProcess | undefined;
/** The parent cgroup (rootbox's), when this test made it (removed after, if empty). */
let made: string | undefined;

/** The child's CPU time in clock ticks (/proc/<pid>/stat's utime); undefined once it is gone. */
const ticks = () => {
  try {
    return Number(readFileSync(`/proc/${child!.pid}/stat`, 'utf8').split(') ')[1].split(' ')[11]);
  } catch {
    return undefined;
  }
};

test.before(() => {
  made = mkdirSync(dir, { recursive: true }) === join(dir, '..') ? join(dir, '..') : undefined;
  child = spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }); // busy: its CPU time says whether it runs
  writeFileSync(join(dir, 'cgroup.procs'), String(child.pid));
});

test.after(async () => {
  if (existsSync(dir)) {
    thaw(cgroupPath(id));
    child?.kill('SIGKILL');
    await until('the child is gone', () => !readFileSync(join(dir, 'cgroup.procs'), 'utf8').trim(), 5000, 10);
    rmdirSync(dir);
  }
  try {
    if (made) rmdirSync(made);
  } catch {
    // in use by another run's servers: kept
  }
});

test('a frozen server stopped without a grace when runc cannot kill it: killed frozen by the cgroup, never thawed to run', async () => {
  await freeze(cgroupPath(id));
  const pid = child!.pid!;
  const kills: string[] = [];
  const runc = {
    kill: async (_id: string, signal: string) => (kills.push(signal), false), // runc kill failed
    state: async () => ({ id, pid, status: 'paused', bundle: '', created: '' }),
    delete: async () => {},
  } as unknown as Runc;
  const frozenAt = ticks();
  await haltContainer(runc, id, 0);
  assert.ok(kills.includes('KILL'), 'runc asked first');
  await until('the child is gone', () => child!.exitCode !== null || child!.signalCode !== null, 5000, 10);
  assert.is(child!.signalCode, 'SIGKILL');
  const after = ticks();
  assert.ok(after === undefined || after === frozenAt, `it ran after the freeze (${frozenAt} → ${after} ticks)`);
  assert.not.ok(existsSync(dir), 'its cgroup removed');
});

test.run();
