// What a server can learn about the host from its own mount table, and how the host mounts its
// root: a real runc container, read from inside over `runc exec`.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeSync, openSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { diskPaths, mountTable } from '../../src/runtime/disk.js';
import { run } from '../../src/runtime/proc.js';
import { MiB, newId, sh, startRuntime, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const id = newId('l');

test.before(async () => {
  env = await startRuntime('leak', 37);
  await env.rt.create({ id, slug: 'leaky', memoryBytes: 96 * MiB, diskBytes: 160 * MiB });
});
test.after(async () => {
  await env?.cleanup();
});

const paths = () => diskPaths(env.rt.serverDir(id));

/** Every spelling of the data dir a mount line could carry. */
const hostNames = () => [...new Set([env.dataDir, realpathSync(env.dataDir)])];

test('mountinfo inside a server names no path of the host data dir, on any line', async () => {
  const r = await sh(env.rt, id, 'cat /proc/self/mountinfo; echo ---; cat /proc/1/mountinfo; echo ---; cat /proc/self/mounts');
  assert.is(r.code, 0, r.err);
  assert.match(r.out, / \/ rw,[^ ]* - overlay /, 'the root is the overlay');
  assert.match(r.out, / \/run\/rootbox ro,/, 'the init files are mounted');
  for (const name of hostNames()) {
    const bad = r.out.split('\n').filter((l) => l.includes(name));
    assert.equal(bad, [], `lines naming ${name}`);
  }
  assert.not.match(r.out, /\/servers\/srv_|\/runtime\/init|disk\/(upper|work)/);
});

test('the init files a server runs come from its own disk and are current', async () => {
  const r = await sh(env.rt, id, 'readlink /proc/1/exe; ls /run/rootbox; cat /proc/1/cmdline | tr "\\0" " "');
  assert.is(r.code, 0, r.err);
  assert.match(r.out, /\/run\/rootbox\/tini/);
  assert.match(r.out, /supervisor/);
  // writing the bundle again copies nothing that is current (it runs for every server at start)
  const tini = join(paths().init, 'tini');
  const ino = statSync(tini).ino;
  env.rt.writeBundle(env.store.runtime.get(id)!);
  assert.is(statSync(tini).ino, ino, 'tini was not copied again');
  // a file the daemon adds to its init dir reaches a running server when its bundle is written
  // (reconcile writes every bundle at start, so an upgraded daemon's exec wrapper is there)
  writeFileSync(join(env.rt.deps.initDir, 'marker'), 'v2\n', { mode: 0o755 });
  try {
    env.rt.writeBundle(env.store.runtime.get(id)!);
    assert.is((await sh(env.rt, id, 'cat /run/rootbox/marker')).out, 'v2\n');
  } finally {
    rmSync(join(env.rt.deps.initDir, 'marker'), { force: true });
    env.rt.writeBundle(env.store.runtime.get(id)!);
  }
  assert.is((await sh(env.rt, id, 'test -e /run/rootbox/marker; echo $?')).out, '1\n', 'files gone from the init dir are removed');
});

test('the host mounts of a server root (disk image and overlay) are nosuid,nodev', () => {
  const p = paths();
  const table = mountTable();
  for (const m of [p.disk, p.rootfs]) {
    const opts = table.get(m);
    assert.ok(opts, `${m} is mounted`);
    assert.ok(opts!.includes('nosuid') && opts!.includes('nodev'), `${m}: ${opts!.join(',')}`);
  }
});

test('a device node a server leaves in its files cannot be opened through the host side of its root', async () => {
  const p = paths();
  // what a server could make if it ever got CAP_MKNOD: /dev/null's numbers, in its upper layer
  await run('mknod', ['-m', '666', join(p.upper, 'nulldev'), 'c', '1', '3']);
  let code = '';
  try {
    closeSync(openSync(join(p.rootfs, 'nulldev'), 'r'));
  } catch (e) {
    code = (e as NodeJS.ErrnoException).code ?? '';
  } finally {
    rmSync(join(p.upper, 'nulldev'), { force: true });
  }
  assert.is(code, 'EACCES');
});

test('root mounts made without nosuid,nodev (an older daemon) get them at the next start', async () => {
  const p = paths();
  await env.rt.stop(id);
  await env.rt.unpark(id); // an older daemon parked nothing: this start makes the container
  await run('mount', ['-o', 'remount,bind,suid,dev,relatime', p.rootfs]);
  await run('mount', ['-o', 'remount,bind,suid,dev,noatime', p.disk]);
  assert.not.ok(mountTable().get(p.rootfs)!.includes('nosuid'));
  await env.rt.start(id);
  const table = mountTable();
  for (const m of [p.disk, p.rootfs]) assert.ok(table.get(m)!.includes('nosuid') && table.get(m)!.includes('nodev'), `${m}: ${table.get(m)!.join(',')}`);
  for (const m of [p.disk, p.rootfs]) assert.ok(table.get(m)!.includes('noatime'), `${m}: ${table.get(m)!.join(',')}`);
  assert.is((await sh(env.rt, id, 'echo ok')).out, 'ok\n');
});

test.run();
