// A server's /dev on real runc servers, read from inside over the runtime's exec: `df`, `df -a`,
// `df -i -a` and /proc/self/mountinfo show no host devtmpfs, no host device (not the loop device
// of the server's own disk either: it is mounted under the name `disk`) or host path as a mount's
// source, and no size or inode count but the server's own (the device
// files come from the daemon's sizeless devices tmpfs: runtime/devices.ts), the device files and
// /dev links work (also /dev/tty as the terminal of a PTY session), the device cgroup allows
// nothing more than before, and all of it holds after a parked wake, a cold start and a daemon
// restart (which mounts a new devices tmpfs while the running server keeps its own).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync, realpathSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { MiB, newId, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const id = newId('dev');
const DISK = 160 * MiB;
/** Most inodes a filesystem of the server may show: its disk has ~41k; a tmpfs without
 *  nr_inodes gets half the host's memory pages (checked below to be far more). */
const MAX_INODES = 65536;
/** A host block device by its kernel name (the loop device of the server's disk among them). */
const HOST_DEVICE = /(^|[\s/])(loop\d+|[svx]d[a-z]+\d*|nvme\d+n\d+(p\d+)?|dm-\d+|md\d+|mapper\/\S+)(\s|$)/m;

test.before(async () => {
  env = await startRuntime('devs', 117);
  await env.rt.create({ id, slug: 'devs', memoryBytes: 96 * MiB, diskBytes: DISK });
});
test.after(async () => {
  await env?.cleanup();
});

const out = async (script: string) => {
  const r = await sh(env.rt, id, script);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out;
};

/** What df and the mount table inside say that is not the server's own: devtmpfs lines, and
 *  sizes beyond the server's disk (the host has far more memory: checked below). */
async function hostTraces(): Promise<string[]> {
  const df = await out('df -k');
  const all = await out('df -k -a');
  const inodes = await out('df -i -a');
  const mountinfo = await out('cat /proc/self/mountinfo');
  const bad: string[] = [];
  for (const [what, text] of [
    ['df', df],
    ['df -a', all],
    ['mountinfo', mountinfo],
  ]) {
    for (const line of text.split('\n').filter((l) => /devtmpfs/.test(l))) bad.push(`${what}: ${line}`);
    for (const line of text.split('\n').filter((l) => HOST_DEVICE.test(l))) bad.push(`${what} names a host device: ${line}`);
  }
  for (const line of all
    .split('\n')
    .slice(1)
    .filter((l) => l.startsWith('/')))
    bad.push(`df -a lists a host path as a source: ${line}`);
  for (const line of mountinfo.split('\n').filter(Boolean)) {
    const source = line.split(' - ')[1]?.split(' ')[1] ?? '';
    if (source.startsWith('/')) bad.push(`mountinfo source is a host path: ${line}`);
    if (line.includes(env.dataDir) || line.includes('/servers/')) bad.push(`mountinfo names the daemon's data dir: ${line}`);
  }
  for (const line of all.split('\n').slice(1).filter(Boolean)) {
    const size = Number(line.split(/\s+/)[1]);
    if (size * 1024 > DISK) bad.push(`df -a size beyond the server's disk: ${line}`);
  }
  for (const line of inodes.split('\n').slice(1).filter(Boolean)) {
    if (Number(line.split(/\s+/)[1]) > MAX_INODES) bad.push(`df -i -a inodes of the host's memory: ${line}`);
  }
  for (const [line, kib] of [...mountinfo.matchAll(/^.*\bsize=(\d+)k.*$/gm)].map((m) => [m[0], Number(m[1])] as const)) {
    if (kib * 1024 > DISK) bad.push(`mountinfo size beyond the server's disk: ${line}`);
  }
  for (const line of df.split('\n').filter((l) => /\s\/dev\/(null|zero|full|random|urandom|tty)$/.test(l))) bad.push(`df lists a device file: ${line}`);
  return bad;
}

test("plain df, df -a, df -i -a and /proc/self/mountinfo inside a server show no host devtmpfs, no host device or path (its disk's loop device included) and no size or inode count of the host's", async () => {
  assert.ok(totalmem() > 4 * DISK, "the host's memory (devtmpfs' size) is larger than the server's disk, so the test can tell them apart");
  assert.ok(totalmem() / 8192 > 4 * MAX_INODES, "a tmpfs's default inode count (from the host's memory) is larger than any the server's own filesystems show");
  assert.equal(await hostTraces(), []);
  const df = await out('df -k');
  assert.match(df, /^overlay\s.*\s\/$/m, 'the root is listed');
  assert.match(df, /^tmpfs\s+65536\s.*\s\/dev$/m, "/dev is the server's own 64 MiB tmpfs");
  assert.match(df, /^disk\s.*\s\/run\/rootbox$/m, "the init files' mount names the server's disk, not the host's loop device");
});

test("the block-device lists inside a server (/proc/partitions, /sys/block and its aliases) name none of the host's disks nor another server's loop device", async () => {
  const lists = await out('cat /proc/partitions; ls /sys/block /sys/class/block /sys/dev/block /sys/devices/virtual/block 2>/dev/null; true');
  assert.not.match(lists, HOST_DEVICE);
  // the host itself has block devices these lists would show (its root disk, the server's loop device)
  assert.match(readFileSync('/proc/partitions', 'utf8'), HOST_DEVICE);
});

test('the device files and /dev links work (null, zero, full, random, urandom, fd, stdin/stdout/stderr, ptmx), and the server cannot change the shared device files', async () => {
  const r = await out(
    [
      'echo gone > /dev/null && echo null-ok',
      'head -c 4 /dev/zero | od -An -tx1',
      'head -c 32 /dev/urandom | wc -c',
      'head -c 8 /dev/random | wc -c',
      'echo x 2>/dev/null > /dev/full || echo full-is-full',
      'cat <(echo via-proc-subst)',
      'echo via-stdout > /dev/stdout',
      'echo via-stdin | cat /dev/stdin',
      'ls /dev/fd/ | head -1',
      'stat -c "%n %F %t:%T" /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty',
      'python3 -c "import os; m, s = os.openpty(); print(\'pty\', os.ttyname(s))"',
      // the files are shared by every server of the daemon: none may change them
      'chmod 600 /dev/null 2>/dev/null || echo chmod-refused',
      'chown 0:0 /dev/urandom 2>/dev/null || echo chown-refused',
      'stat -c "%a" /dev/null',
    ].join('; '),
  );
  assert.match(r, /null-ok/);
  assert.match(r, /^ 00 00 00 00$/m);
  assert.match(r, /^32\n8\n/m);
  assert.match(r, /full-is-full/);
  assert.match(r, /via-proc-subst\nvia-stdout\nvia-stdin\n0\n/);
  for (const [name, dev] of [
    ['null', '1:3'],
    ['zero', '1:5'],
    ['full', '1:7'],
    ['random', '1:8'],
    ['urandom', '1:9'],
    ['tty', '5:0'],
  ])
    assert.match(r, new RegExp(`^/dev/${name} character special file ${dev}$`, 'm'));
  assert.match(r, /^pty \/dev\/pts\/\d+$/m, '/dev/ptmx opens the server’s own devpts');
  assert.match(r, /chmod-refused\nchown-refused\n666\n$/);
});

test('/dev/tty is the controlling terminal of a PTY session (runc exec -t), and no terminal without one', async () => {
  const r = await sh(env.rt, id, 'echo x > /dev/tty');
  assert.is.not(r.code, 0);
  assert.match(r.err, /No such device or address/);
  const p = env.rt.execPty(id, { argv: ['/bin/bash', '--norc', '-i'], cols: 80, rows: 24, term: 'xterm' });
  let text = '';
  p.onData((d) => (text += d.toString()));
  assert.ok(await waitFor(() => text.includes('# '), 5000), text);
  p.write('echo via-dev-$((6*7)) > /dev/tty; exit 0\n');
  assert.equal(await p.exited, { code: 0, signal: null });
  assert.match(text, /via-dev-42/);
});

test('the device cgroup allows only runc’s default devices (these six, ptys, mknod), everything else denied', () => {
  const list = readFileSync(`/sys/fs/cgroup/devices${env.rt.cgroup(id)}/devices.list`, 'utf8')
    .trim()
    .split('\n')
    .sort();
  assert.equal(
    list,
    ['b *:* m', 'c *:* m', 'c 1:3 rwm', 'c 1:5 rwm', 'c 1:7 rwm', 'c 1:8 rwm', 'c 1:9 rwm', 'c 10:200 rwm', 'c 136:* rwm', 'c 5:0 rwm', 'c 5:2 rwm'].sort(),
  );
});

test('after a parked wake, a cold start and a daemon restart the server still shows no host device and its devices work', async () => {
  const check = async (when: string) => {
    assert.equal(await hostTraces(), [], when);
    assert.match(await out('echo x > /dev/null && head -c 16 /dev/urandom | wc -c'), /^16$/m, when);
  };
  await env.rt.stop(id); // parked (runtime.parkOnSleep is on by default)
  await env.rt.start(id);
  await check('parked wake');
  await env.rt.stop(id, { park: false });
  await env.rt.start(id);
  await check('cold start');
  const dir = realpathSync(join(env.dataDir, 'devices'));
  const mountsAt = () =>
    readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .filter((l) => l.split(' ')[4] === dir).length;
  assert.is(mountsAt(), 1, 'one devices tmpfs on the host');
  await env.restart(); // the old runtime detaches its devices tmpfs, the new one mounts its own
  assert.is(mountsAt(), 1, 'still one devices tmpfs on the host');
  await check('running across a daemon restart');
  await env.rt.stop(id, { park: false });
  await env.rt.start(id);
  await check('started by the new daemon');
});

test.run();
