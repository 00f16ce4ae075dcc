// The stop of a frozen server without a grace (runtime/halt.ts) on a real cgroup of its own (root,
// no runc: the test's Runc fails its kill, as runc does when it cannot signal the container): the
// frozen process is killed where it stands through its cgroup (cgroup.kill on v2, else each of its
// processes) and never runs
// again — it is not thawed while its SIGKILL was not sent. A second daemon of the machine with a
// server of the same id (a move between two daemons of one machine) has its own cgroup (its nft
// table's parent: spec.ts cgroupPath): its process lives on, untouched.

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
/** This daemon's runtime config (its nft table) and the other daemon's. */
const mine = { nftTable: `rbh${process.pid % 100000}a` };
const other = { nftTable: `rbh${process.pid % 100000}b` };
const cgroupDir = (c: string) => (V2 ? join(ROOT, c) : join(ROOT, 'freezer', c));
const dir = cgroupDir(cgroupPath(mine, id));
const otherDir = cgroupDir(cgroupPath(other, id));
let child: ChildProcess | undefined;
/** The other daemon's process of a server of the same id. */
let otherChild: ChildProcess | undefined;

/** The child's CPU time in clock ticks (/proc/<pid>/stat's utime); undefined once it is gone. */
const ticks = (c = child) => {
  try {
    return Number(readFileSync(`/proc/${c!.pid}/stat`, 'utf8').split(') ')[1].split(' ')[11]);
  } catch {
    return undefined;
  }
};

/** A busy process (its CPU time says whether it runs) in cgroup directory `d`. */
function busyIn(d: string): ChildProcess {
  mkdirSync(d, { recursive: true });
  const c = spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' });
  writeFileSync(join(d, 'cgroup.procs'), String(c.pid));
  return c;
}

test.before(() => {
  child = busyIn(dir);
  otherChild = busyIn(otherDir);
});

test.after(async () => {
  for (const [d, c, cfg] of [
    [dir, child, mine],
    [otherDir, otherChild, other],
  ] as const) {
    if (existsSync(d)) {
      thaw(cgroupPath(cfg, id));
      c?.kill('SIGKILL');
      await until('the child is gone', () => !readFileSync(join(d, 'cgroup.procs'), 'utf8').trim(), 5000, 10);
      rmdirSync(d);
    }
    rmdirSync(join(d, '..')); // the daemon's parent, made by this test
  }
});

test('a frozen server stopped without a grace when runc cannot kill it: killed frozen by the cgroup, never thawed to run; the same server of another daemon lives on', async () => {
  await freeze(cgroupPath(mine, id));
  const pid = child!.pid!;
  const kills: string[] = [];
  const runc = {
    kill: async (_id: string, signal: string) => (kills.push(signal), false), // runc kill failed
    state: async () => ({ id, pid, status: 'paused', bundle: '', created: '' }),
    delete: async () => {},
  } as unknown as Runc;
  const frozenAt = ticks();
  const otherBefore = ticks(otherChild);
  await haltContainer(runc, id, cgroupPath(mine, id), 0);
  assert.ok(kills.includes('KILL'), 'runc asked first');
  await until('the child is gone', () => child!.exitCode !== null || child!.signalCode !== null, 5000, 10);
  assert.is(child!.signalCode, 'SIGKILL');
  const after = ticks();
  assert.ok(after === undefined || after === frozenAt, `it ran after the freeze (${frozenAt} → ${after} ticks)`);
  assert.not.ok(existsSync(dir), 'its cgroup removed');
  await until("the other daemon's process runs", () => ticks(otherChild)! > otherBefore!, 5000, 10);
  assert.is(otherChild!.exitCode, null, "the other daemon's server of the same id lives");
  assert.is(otherChild!.signalCode, null);
  assert.equal(readFileSync(join(otherDir, 'cgroup.procs'), 'utf8').trim(), String(otherChild!.pid), 'in its own cgroup');
});

test.run();
