// A checkpoint's writtenAt (the disk image's mtime it answers for) against writes that land right
// after its copy. A sleeping server's newest checkpoint is taken for its disk as it is when the
// image was not written since writtenAt (no checkpoint at its next sleep, none for a move: the
// drain's move ships it). CI's drain20 showed a moved server serving the welcome page: its files
// were written by an exec that the freeze of a checkpoint held, and they reached the image after
// the thaw but before writtenAt was read (after the freeze tool exited and `fsfreeze -u` ran), so
// the checkpoint without them counted as current. Here a writer on the host (what the files routes
// do to a sleeping server) is held by the freeze and writes and flushes a page the moment it
// thaws; whenever the copy lacks that page, the disk must read as changed since the checkpoint.
// And a disk nothing wrote to since its checkpoint reads unchanged (no checkpoint taken for nothing),
// while a write still in the page cache when the server is stopped (its sleep, a move) reads as a
// change at once, not at the writeback up to 30 s later — and when that stop's flush fails (the
// runtime's disk flush given a failing one), the disk reads as changed all the same until a new
// checkpoint holds it.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CheckpointEngine, Checkpoints, DirBlobStore } from '../../src/checkpoints/index.js';
import { syncDisk } from '../../src/runtime/index.js';
import { MiB, newId, sh, startRuntime, type RuntimeEnv } from '../runtime/helpers/env.js';

let env: RuntimeEnv;
let cps: Checkpoints;
const id = newId('wat');
const settings = { tier: 'free', image: 'test', slug: 'ckp-wat', runSh: false };
/** While set, the runtime's flush of a server's disk fails (as `sync -f` on an I/O error). */
let flushFails = false;

test.before(async () => {
  env = await startRuntime(
    'wat',
    163,
    {},
    {
      syncDisk: async (mountpoint) => {
        if (flushFails) throw new Error('sync: error syncing: Input/output error');
        await syncDisk(mountpoint);
      },
    },
  );
  const engine = new CheckpointEngine({ store: new DirBlobStore(join(env.dataDir, 'checkpoints')), secret: { key: async () => Buffer.alloc(32, 5) } });
  cps = new Checkpoints(engine, env.rt);
});
test.after(async () => {
  await env?.cleanup();
});

/** Writes `page` to /root/www/index.html through the host view of the server's root once a write
 *  of its is held (the disk frozen for a checkpoint's copy), and flushes it the moment it thaws. */
async function writeWhenThawed(rootfs: string, page: string, marker: string): Promise<{ held: boolean }> {
  const deadline = Date.now() + 20_000;
  while (!existsSync(marker) && Date.now() < deadline) await new Promise((r) => setImmediate(r));
  let held = false;
  while (!held && existsSync(marker) && Date.now() < deadline) {
    const t = performance.now();
    await writeFile(join(rootfs, 'root', 'probe'), String(t));
    held = performance.now() - t > 30;
  }
  const fh = await open(join(rootfs, 'root', 'www', 'index.html'), 'w');
  try {
    await fh.writeFile(page);
    await fh.sync(); // into the image now, not at the next writeback
  } finally {
    await fh.close();
  }
  return { held };
}

test('a write the copy missed leaves the disk changed since the checkpoint (the next sleep or move takes one)', async () => {
  const s = await env.rt.create({ id, slug: 'ckp-wat', memoryBytes: 256 * MiB, diskBytes: 512 * MiB });
  // enough data that the copy (and so the freeze) lasts
  const w = await sh(env.rt, id, 'mkdir -p /root/www && echo first > /root/www/index.html && head -c 200000000 /dev/urandom > /root/bulk && sync');
  assert.is(w.code, 0, w.err);
  await env.rt.stop(id);
  assert.is(env.rt.get(id)?.state, 'sleeping');
  const marker = join(env.rt.serverDir(id), 'disk.frozen');
  const www = join(s.rootfs, 'root', 'www', 'index.html');
  let missed = 0;
  for (let round = 0; round < 3; round++) {
    const page = `round ${round}\n`;
    const writer = writeWhenThawed(s.rootfs, page, marker);
    const taken = await cps.take(id, settings, 'auto');
    const { held } = await writer;
    const written = env.rt.diskWrittenAt(id)!;
    const unchanged = !(written > taken.writtenAt);
    await cps.restore(id, taken.manifest.id);
    assert.is(env.rt.get(id)?.state, 'sleeping', 'restored asleep');
    const kept = readFileSync(www, 'utf8');
    if (kept !== page) missed++;
    console.log(
      `  round ${round}: writer held ${held}, checkpoint has ${JSON.stringify(kept)}, image written ${(written - taken.writtenAt).toFixed(3)} ms after writtenAt`,
    );
    assert.ok(
      kept === page || !unchanged,
      `round ${round}: the checkpoint lacks the page written after its copy (${JSON.stringify(kept)}), yet the disk reads unchanged since it (image mtime ${written}, writtenAt ${taken.writtenAt})`,
    );
  }
  assert.ok(missed > 0, 'in some round the write came after the copy (the case this test is about)');
});

test('a checkpoint of a sleeping disk nothing writes to holds it as it is: no change read after it (a move reuses it)', async () => {
  const fresh = join(env.rt.get(id)!.rootfs, 'root', 'www', 'fresh.html');
  writeFileSync(fresh, 'fresh\n', { flush: true });
  const taken = await cps.take(id, settings, 'auto');
  // a page written before the checkpoint read after it through the host view of its root, as the
  // edge serves a sleeping server's files: a read is no write (no atime written back to its disk)
  assert.is(readFileSync(fresh, 'utf8'), 'fresh\n');
  assert.is(env.rt.diskWrittenAt(id), taken.writtenAt, 'the image unchanged since the checkpoint');
  await env.rt.stop(id, { park: false }); // the move's stop flushes whatever is dirty (no wait for writeback needed): nothing, still the checkpoint's
  assert.is(env.rt.diskWrittenAt(id), taken.writtenAt, 'the image unchanged by the stop');
});

test('a write still in the page cache when a sleeping server is stopped (a move) reads as a change after the stop', async () => {
  const taken = await cps.take(id, settings, 'auto');
  // a files-route write to the sleeping server: on its image only at writeback, up to 30 s later
  writeFileSync(join(env.rt.get(id)!.rootfs, 'root', 'www', 'late.html'), 'late\n');
  await env.rt.stop(id, { park: false }); // the move's stop, before it asks whether its newest checkpoint is current
  const written = env.rt.diskWrittenAt(id)!;
  assert.ok(written > taken.writtenAt, `the image written after the checkpoint (mtime ${written}, writtenAt ${taken.writtenAt})`);
});

test('a stop whose flush fails leaves the disk changed since its checkpoint (a new one is taken, the older one never reused) until a checkpoint holds it', async () => {
  const taken = await cps.take(id, settings, 'auto');
  const page = join(env.rt.get(id)!.rootfs, 'root', 'www', 'unflushed.html');
  writeFileSync(page, 'unflushed\n'); // in the page cache, on the image only at writeback
  flushFails = true;
  try {
    await env.rt.stop(id, { park: false }); // the move's stop: its flush fails, the write stays dirty
    const written = env.rt.diskWrittenAt(id)!;
    assert.ok(written > taken.writtenAt, `changed since the checkpoint after a failed flush (disk written ${written}, writtenAt ${taken.writtenAt})`);
    assert.is(await env.rt.settledDiskAt(id), undefined, 'no settled time from a flush that failed');
  } finally {
    flushFails = false;
  }
  // the next checkpoint (its copy frozen: what was dirty is in it) is what the disk holds again
  const again = await cps.take(id, settings, 'auto');
  assert.ok(again.writtenAt > taken.writtenAt);
  assert.is(env.rt.diskWrittenAt(id), again.writtenAt, 'unchanged since the new checkpoint');
  await cps.restore(id, again.manifest.id);
  assert.is(readFileSync(page, 'utf8'), 'unflushed\n', 'the new checkpoint holds the write the failed flush left dirty');
});

test.run();
