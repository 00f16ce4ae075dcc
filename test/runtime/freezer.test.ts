// The cgroup freezer's thaw (runtime/freezer.ts) on a real cgroup of its own (root, no runc): a
// frozen process runs again once thaw() returns, a thaw of a cgroup that is gone is nothing to
// do (and makes no file), and a thaw of a running cgroup changes nothing. The control file a
// freeze opens is the thaw's and is closed by it (or by the cgroup's removal); a cgroup made
// again under the same path is thawed by name. The pin: an empty cgroup kept frozen under a
// parent (cgroup v1), gone with unpin.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freeze, isFrozen, pin, thaw, unpin, watchThaws } from '../../src/runtime/freezer.js';
import { removeCgroup } from '../../src/runtime/cgroup.js';
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

/** This process's open files in the freezer cgroup `p`. */
const openIn = (p: string) =>
  readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`).startsWith(`${V2 ? join(ROOT, p) : join(ROOT, 'freezer', p)}/`);
    } catch {
      return false;
    }
  }).length;

test("a freeze's control file stays open until its thaw, which closes it", async () => {
  await freeze(path);
  assert.is(openIn(path), 1, 'open while frozen');
  thaw(path);
  assert.ok(!isFrozen(path));
  assert.is(openIn(path), 0, 'closed by the thaw');
});

/** An empty cgroup of this test's, frozen (by freeze() or by hand). */
const emptyPath = `rootbox-freezer-test-empty-${process.pid}`;
const emptyDir = V2 ? join(ROOT, emptyPath) : join(ROOT, 'freezer', emptyPath);
const freezeByHand = () => writeFileSync(join(emptyDir, V2 ? 'cgroup.freeze' : 'freezer.state'), V2 ? '1' : 'FROZEN');

test('a cgroup removed while frozen and made again under its path is thawed by name; the old file is closed', async () => {
  mkdirSync(emptyDir);
  try {
    await freeze(emptyPath);
    rmdirSync(emptyDir);
    mkdirSync(emptyDir);
    freezeByHand();
    await until('the new cgroup is frozen', () => isFrozen(emptyPath), 2000, 5);
    thaw(emptyPath);
    assert.ok(!isFrozen(emptyPath), 'the new cgroup of that path thawed');
    assert.is(openIn(emptyPath), 0);
  } finally {
    removeCgroup(emptyPath);
  }
});

test('removing a frozen cgroup closes the file its freeze left open', async () => {
  mkdirSync(emptyDir);
  await freeze(emptyPath);
  assert.is(openIn(emptyPath), 1);
  removeCgroup(emptyPath);
  assert.ok(!existsSync(emptyDir));
  assert.is(openIn(emptyPath), 0);
});

test('each thaw is told to the watchers once the thawing call is done, until they stop watching', async () => {
  const told: string[] = [];
  const stop = watchThaws((p) => told.push(p));
  try {
    await freeze(path);
    thaw(path);
    assert.equal(told, [], 'not inside the call');
    await Promise.resolve();
    assert.equal(told, [path]);
  } finally {
    stop();
  }
  thaw(path);
  await Promise.resolve();
  assert.equal(told, [path], 'not after stop');
});

test('pin keeps an empty cgroup frozen under the parent (v1); unpin removes it, and the parent can go', () => {
  const parent = `rootbox-freezer-test-parent-${process.pid}`;
  const pinDir = join(ROOT, 'freezer', parent, 'freezer-pin');
  try {
    assert.ok(pin(parent));
    if (V2) return assert.ok(!existsSync(join(ROOT, parent)), 'v2: nothing to keep');
    assert.is(readFileSync(join(pinDir, 'freezer.state'), 'utf8').trim(), 'FROZEN');
    assert.is(readFileSync(join(pinDir, 'cgroup.procs'), 'utf8').trim(), '', 'empty');
    assert.ok(pin(parent), 'again: the same pin');
    unpin(parent);
    assert.ok(!existsSync(pinDir));
    removeCgroup(`/${parent}`);
    assert.ok(!existsSync(join(ROOT, 'freezer', parent)), 'the parent went');
  } finally {
    unpin(parent);
    removeCgroup(`/${parent}`);
  }
});

test.run();
