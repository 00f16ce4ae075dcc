// The cgroup freezer's thaw (runtime/freezer.ts) on a real cgroup of its own (root, no runc): a
// frozen process runs again once thaw() returns, a thaw of a cgroup that is gone is nothing to
// do (and makes no file), and a thaw of a running cgroup changes nothing.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freeze, isFrozen, thaw } from '../../src/runtime/freezer.js';
import { until } from '../helpers/wait.js';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));
const path = `rootbox-freezer-test-${process.pid}`;
const dir = V2 ? join(ROOT, path) : join(ROOT, 'freezer', path);
let child: ChildProcess | undefined;

/** The child's CPU time in clock ticks (/proc/<pid>/stat's utime). */
const ticks = () => Number(readFileSync(`/proc/${child!.pid}/stat`, 'utf8').split(') ')[1].split(' ')[11]);

test.before(() => {
  mkdirSync(dir);
  child = spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }); // busy: its CPU time says whether it runs
  writeFileSync(join(dir, 'cgroup.procs'), String(child.pid));
});

test.after(async () => {
  if (existsSync(dir)) thaw(path);
  child?.kill('SIGKILL');
  await until('the child is gone', () => !readFileSync(join(dir, 'cgroup.procs'), 'utf8').trim(), 5000, 10);
  rmdirSync(dir);
});

test('a frozen cgroup runs again once thaw() returns', async () => {
  await freeze(path);
  assert.ok(isFrozen(path));
  const frozenAt = ticks();
  await new Promise((r) => setTimeout(r, 100));
  assert.is(ticks(), frozenAt, 'no CPU time while frozen');
  thaw(path);
  assert.ok(!isFrozen(path), 'thawed when thaw() returns');
  await until('the child runs again', () => ticks() > frozenAt, 5000, 10);
});

test('a thaw of a cgroup that is gone is nothing to do and makes nothing', () => {
  const gone = `rootbox-freezer-test-gone-${process.pid}`;
  thaw(gone);
  assert.ok(!existsSync(V2 ? join(ROOT, gone) : join(ROOT, 'freezer', gone)));
});

test('a thaw of a cgroup that is not frozen changes nothing', () => {
  thaw(path);
  thaw(path);
  assert.ok(!isFrozen(path));
});

test.run();
