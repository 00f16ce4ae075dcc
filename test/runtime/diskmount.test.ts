// A server's disk as the mount helper mounts it (runtime/helper.ts: rbx-idmount `loop` and
// `grow`), on a real ext4 image and real loop devices: the mount's source is the name `disk`, not
// /dev/loopN; the loop device is attached with autoclear, so it is freed by the umount, by a
// failed mount, and by the helper being killed between attaching the device and mounting it;
// online growth refuses a mount point not on the device it is given.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DISK_SOURCE, growMountedDisk, helperPath, mountDiskImage } from '../../src/runtime/helper.js';
import { CommandError, run, tryRun } from '../../src/runtime/proc.js';

const helper = helperPath();
const dir = mkdtempSync(join(tmpdir(), 'rbx-diskmount-'));
const img = join(dir, 'disk.img');
const target = join(dir, 'disk');
const MiB = 1024 * 1024;

/** Loop devices backed by the test's image. */
const loops = async () =>
  (await run('losetup', ['-n', '-O', 'NAME,AUTOCLEAR', '-j', img])).stdout
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
/** The mount at the target, as the host's mountinfo has it: source and major:minor. */
const mountAt = () => {
  const line = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .find((l) => l.split(' ')[4] === target);
  return line ? { source: line.split(' - ')[1].split(' ')[1], dev: line.split(' ')[2], options: line.split(' ')[5] } : undefined;
};
const scratch = () => readdirSync(dir).filter((n) => n.startsWith('.loop-'));

test.before(async () => {
  const fd = openSync(img, 'wx', 0o600);
  ftruncateSync(fd, 64 * MiB);
  closeSync(fd);
  await run('mkfs.ext4', ['-q', '-F', '-m', '0', img]);
  mkdirSync(target);
});
test.after(async () => {
  for (let i = 0; i < 4 && mountAt(); i++) await tryRun('umount', [target]);
  for (const l of await loops()) await tryRun('losetup', ['-d', l.split(/\s+/)[0]]);
  rmSync(dir, { recursive: true, force: true });
});

test('the disk is mounted nosuid,nodev,noatime under the source name `disk` through an autoclear loop device, freed by the umount', async () => {
  await mountDiskImage(helper, { img, dir, target });
  const m = mountAt();
  assert.ok(m, 'mounted');
  assert.is(m.source, DISK_SOURCE);
  assert.is(DISK_SOURCE, 'disk');
  assert.match(m.dev, /^7:\d+$/, 'on a loop device');
  for (const o of ['nosuid', 'nodev', 'noatime']) assert.ok(m.options.split(',').includes(o), `${o} in ${m.options}`);
  assert.equal(
    (await loops()).map((l) => l.split(/\s+/)[1]),
    ['1'],
    'one loop device, autoclear set',
  );
  assert.equal(scratch(), [], 'the scratch directory is gone');
  await run('umount', [target]);
  assert.equal(await loops(), [], 'the umount freed the loop device');
});

test('a mount that fails frees its loop device at once and leaves no scratch directory', async () => {
  const err = await run(helper, ['loop', img, join(dir, 'no-such-dir'), 'disk'], { cwd: dir }).then(
    () => undefined,
    (e: Error) => e,
  );
  assert.ok(err, 'the mount failed');
  assert.equal(await loops(), []);
  assert.equal(scratch(), []);
});

test('a helper killed (SIGKILL) after attaching the loop device and before mounting leaves no loop device; the next mount works and removes its scratch directory', async () => {
  // strace delivers SIGKILL as the helper enters mount(2): the device is attached, nothing mounted
  const killed = await run('strace', ['-o', '/dev/null', '-e', 'inject=mount:signal=KILL', helper, 'loop', img, target, 'disk'], { cwd: dir }).then(
    () => undefined,
    (e: CommandError) => e,
  );
  assert.is(killed?.signal, 'SIGKILL', 'the helper was killed (strace ends with its signal)');
  assert.is(killed?.stderr ?? '', '', 'before it failed anything');
  assert.is(mountAt(), undefined, 'nothing mounted');
  assert.equal(await loops(), [], 'no loop device left');
  assert.is(scratch().length, 1, 'the killed helper left its scratch directory');
  await mountDiskImage(helper, { img, dir, target });
  assert.is(mountAt()?.source, 'disk');
  assert.equal(scratch(), []);
  await run('umount', [target]);
  assert.equal(await loops(), []);
});

test('online growth refuses a mount point that is not on the given device, and grows the mounted disk to its device (or refuses without CAP_SYS_RESOURCE, as resize2fs does)', async () => {
  await mountDiskImage(helper, { img, dir, target });
  try {
    const loop = (await loops())[0].split(/\s+/)[0];
    const wrong = await growMountedDisk(helper, dir, loop).then(
      () => '',
      (e: Error) => e.message,
    );
    assert.match(wrong, /is not mounted from/);
    const fd = openSync(img, 'r+');
    ftruncateSync(fd, 128 * MiB);
    closeSync(fd);
    await run('losetup', ['-c', loop]);
    const before = statfsSync(target).blocks * statfsSync(target).bsize;
    const capEff = BigInt('0x' + (/^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0'));
    const grew = await growMountedDisk(helper, target, loop).then(
      () => '',
      (e: Error) => e.message,
    );
    const after = statfsSync(target).blocks * statfsSync(target).bsize;
    if ((capEff >> 24n) & 1n) {
      assert.is(grew, '');
      assert.ok(after > before + 48 * MiB, `grown: ${before} -> ${after}`);
    } else {
      assert.match(grew, /EXT4_IOC_RESIZE_FS: Operation not permitted/);
      assert.is(after, before);
    }
  } finally {
    await run('umount', [target]);
  }
  assert.equal(await loops(), []);
});

test.run();
