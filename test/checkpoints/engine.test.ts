// The checkpoint engine over the directory store, on plain image files (no server, no root):
// chunks and manifests round-trip byte-exact, holes and zeroes cost nothing, a 10 MiB change
// stores about 10 MiB, the store holds no plain byte, a corrupt or missing chunk refuses the
// restore and leaves nothing, and the collector removes what no manifest names — never a chunk a
// concurrent checkpoint is about to reference.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash, randomBytes } from 'node:crypto';
import { copyFileSync, renameSync, utimesSync } from 'node:fs';
import { AppError } from '../../src/errors.js';
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, closeSync, ftruncateSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BaseMismatch,
  CheckpointEngine,
  collect,
  CorruptBlobError,
  DirBlobStore,
  MissingBlobError,
  newCheckpointId,
  blobKeys,
  validKey,
  Checkpoints,
  StoreUnavailableError,
  type BlobStore,
  type NewCheckpoint,
} from '../../src/checkpoints/index.js';

const MiB = 1 << 20;
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-ckp-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** Resolves when fn rejects (and `check` holds for the error); fails the test when it resolves. */
async function rejects(fn: () => Promise<unknown>, check?: RegExp | ((e: unknown) => boolean)): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (check instanceof RegExp) assert.match(String(e), check);
    else if (check) assert.ok(check(e), `unexpected error ${String(e)}`);
    return;
  }
  assert.unreachable('it resolved');
}

const secret = (b = Buffer.alloc(32, 7)) => ({ key: async () => b });
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

/** A sparse image of `size` bytes with random data written at the given offsets. */
function image(path: string, size: number, writes: [offset: number, bytes: Buffer][]): void {
  const fd = openSync(path, existsSync(path) ? 'r+' : 'w');
  try {
    ftruncateSync(fd, size);
    for (const [off, b] of writes) writeSync(fd, b, 0, b.length, off);
  } finally {
    closeSync(fd);
  }
}

let clockNow = 1_800_000_000_000;
const engineOn = (store: BlobStore, key = secret()) =>
  new CheckpointEngine({ store, secret: key, now: () => clockNow, sleep: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 5))), staleMs: 60_000 });

const meta = (serverId = 'srv_a', kind: 'manual' | 'auto' = 'manual'): NewCheckpoint => ({
  id: newCheckpointId(clockNow++),
  serverId,
  createdAt: clockNow,
  kind,
  settings: { tier: 'free', image: 'base-abc', slug: 'blog', runSh: true },
});

async function storedBytes(store: DirBlobStore, prefix = 'chunks/'): Promise<number> {
  let n = 0;
  for await (const b of store.list(prefix)) n += b.size;
  return n;
}

test('the directory store keeps blobs whole under checked keys and never lists a temporary file', async () => {
  const s = new DirBlobStore(join(tmp(), 'checkpoints'));
  await s.put('chunks/ab/abc', Buffer.from('one'));
  await s.put('chunks/ab/abc', Buffer.from('two'));
  await s.put('manifests/srv_a/ckp_1', Buffer.from('m'));
  assert.is(Buffer.from((await s.get('chunks/ab/abc'))!).toString(), 'two');
  assert.is(await s.get('chunks/ab/none'), null);
  assert.ok(await s.has('manifests/srv_a/ckp_1'));
  assert.not.ok(await s.has('manifests/srv_a'));
  writeFileSync(join(s.where, 'chunks', 'ab', '.abc.123.tmp'), 'half');
  const all: string[] = [];
  for await (const b of s.list('')) all.push(b.key);
  assert.equal(all.sort(), ['chunks/ab/abc', 'manifests/srv_a/ckp_1']);
  const some: string[] = [];
  for await (const b of s.list('manifests/srv_')) some.push(b.key);
  assert.equal(some, ['manifests/srv_a/ckp_1']);
  assert.is(await s.sweepTemp(0, Date.now() + 1000), 1);
  await s.delete('chunks/ab/abc');
  await s.delete('chunks/ab/abc');
  assert.is(await s.get('chunks/ab/abc'), null);
  for (const bad of ['', '/abs', '../up', 'a/../b', 'a//b', '.hidden', 'a/.tmp', 'sp ace', 'a/b/']) {
    assert.not.ok(validKey(bad), bad);
    await rejects(() => s.put(bad, Buffer.from('x')));
  }
});

test('a checkpoint round-trips byte-exact, skips holes and zeroes, and stores no plain byte', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const engine = engineOn(store);
  const img = join(d, 'disk.img');
  const marker = Buffer.from('TENANT-SECRET-'.repeat(1000));
  // 256 MiB sparse: 3 MiB random, a text region, and 4 MiB of written zeroes
  image(img, 256 * MiB, [
    [5 * MiB, randomBytes(3 * MiB)],
    [40 * MiB + 123, marker],
    [100 * MiB, Buffer.alloc(4 * MiB)],
  ]);
  const m = await engine.write(meta(), img);
  assert.is(m.imageBytes, 256 * MiB);
  assert.is(m.chunks.length, 4, 'three random chunks and one text chunk; zeroes and holes none');
  assert.ok((await storedBytes(store)) < 3.1 * MiB);
  for (const f of walk(store.where)) assert.not.ok(readFileSync(f).includes('TENANT-SECRET'), `plain bytes in ${f}`);
  // the data ranges (the runtime's FIEMAP) skip the holes and give the same chunks
  const ranged = await engine.write(meta(), img, [
    [5 * MiB + 4096, 8 * MiB],
    [40 * MiB, 40 * MiB + 8192 + 123],
    [100 * MiB, 104 * MiB],
  ]);
  assert.equal(ranged.chunks, m.chunks);
  assert.is(ranged.newBytes, 0, 'nothing new to store');
  const out = join(d, 'restored.img');
  await engine.materialize((await engine.read('srv_a', m.id))!, out);
  assert.is(sha(out), sha(img));
  assert.ok(statSync(out).blocks * 512 < 8 * MiB, 'the restored image is sparse');
});

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
}

test('ten checkpoints of an image that changes 10 MiB between each store at most 1.3 × (first + 9 × 10 MiB)', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const engine = engineOn(store);
  const img = join(d, 'disk.img');
  image(img, 192 * MiB, [[0, randomBytes(50 * MiB)]]);
  const first = await engine.write(meta(), img);
  const base = await storedBytes(store);
  for (let i = 1; i < 10; i++) {
    // 10 MiB at an offset that is not chunk-aligned: 11 chunks touched
    image(img, 192 * MiB, [[60 * MiB + i * 13 * MiB + 4096 * i, randomBytes(10 * MiB)]]);
    const m = await engine.write(meta(), img);
    assert.ok(m.newBytes <= 11.1 * MiB, `checkpoint ${i} added ${m.newBytes}`);
  }
  const total = await storedBytes(store);
  assert.ok(total <= 1.3 * (base + 9 * 10 * MiB), `${total} > 1.3 × ${base + 90 * MiB}`);
  assert.ok(first.newBytes >= 50 * MiB);
  const list = await engine.list('srv_a');
  assert.is(list.length, 10);
  assert.ok(list[0].createdAt > list[9].createdAt, 'newest first');
});

test('a corrupt or missing chunk refuses the restore and leaves no file', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const engine = engineOn(store);
  const img = join(d, 'disk.img');
  image(img, 64 * MiB, [[0, randomBytes(4 * MiB)]]);
  const m = await engine.write(meta(), img);
  const out = join(d, 'restored.img');
  const victim = join(store.where, ...blobKeys.chunk(m.chunks[2][1]).split('/'));
  const good = readFileSync(victim);
  const bad = Buffer.from(good);
  bad[bad.length - 5] ^= 1;
  writeFileSync(victim, bad);
  await rejects(
    () => engine.materialize(m, out),
    (e: unknown) => e instanceof CorruptBlobError,
  );
  assert.not.ok(existsSync(out));
  // a blob moved to another chunk's key does not open either
  writeFileSync(victim, readFileSync(join(store.where, ...blobKeys.chunk(m.chunks[1][1]).split('/'))));
  await rejects(
    () => engine.materialize(m, out),
    (e: unknown) => e instanceof CorruptBlobError,
  );
  rmSync(victim);
  await rejects(
    () => engine.materialize(m, out),
    (e: unknown) => e instanceof MissingBlobError,
  );
  assert.not.ok(existsSync(out));
  writeFileSync(victim, good);
  await engine.materialize(m, out);
  assert.is(sha(out), sha(img));
  // another secret opens nothing
  await rejects(() => engineOn(store, secret(Buffer.alloc(32, 9))).read('srv_a', m.id));
});

test('a secret whose key could not be read (the registry away at start) is read again at the next use, not kept as a failure', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 4 * MiB, [[0, randomBytes(MiB)]]);
  const m = await engineOn(store).write(meta(), img);
  let reads = 0;
  const away = {
    key: async () => {
      if (++reads === 1) throw AppError.of('registry_unavailable', 'the cluster registry cannot be reached; try again shortly');
      return Buffer.alloc(32, 7);
    },
  };
  const engine = engineOn(store, away);
  await rejects(
    () => engine.list(m.serverId),
    (e: unknown) => e instanceof AppError && e.code === 'registry_unavailable',
  );
  assert.equal(
    (await engine.list(m.serverId)).map((x) => x.id),
    [m.id],
    'read again once the key is there',
  );
  assert.is(reads, 2);
});

test('a patch of a base image to a later checkpoint fetches only the chunks that differ and gives materialize’s bytes; a corrupt chunk or another size refuses', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const engine = engineOn(store);
  const img = join(d, 'disk.img');
  // A: 8 chunks of data over a 64 MiB sparse image
  image(img, 64 * MiB, [[0, randomBytes(8 * MiB)]]);
  const a = await engine.write(meta(), img);
  // B: chunks 1, 3 and 6 rewritten (3 partly), 5 zeroed, 20 new in a hole
  image(img, 64 * MiB, [
    [1 * MiB, randomBytes(MiB)],
    [3 * MiB + 4096, randomBytes(8192)],
    [6 * MiB, randomBytes(MiB)],
    [5 * MiB, Buffer.alloc(MiB)],
    [20 * MiB + 77, randomBytes(1000)],
  ]);
  const b = await engine.write(meta(), img);
  assert.is(b.chunks.length, 8);
  const whole = join(d, 'whole.img');
  await engine.materialize(b, whole);
  assert.is(sha(whole), sha(img));
  const staged = join(d, 'staged.img');
  await engine.materialize(a, staged);
  // the store counts what it is asked for
  const gets: string[] = [];
  const counting = Object.assign(Object.create(store) as BlobStore, { get: (k: string) => (gets.push(k), store.get(k)) });
  const r = await engineOn(counting).patch(a, b, staged);
  assert.equal(r, { fetched: 4, zeroed: 1, chunks: 8 });
  assert.is(gets.filter((k) => k.startsWith('chunks/')).length, 4, 'only the changed chunks fetched');
  assert.is(sha(staged), sha(whole), 'byte for byte the image materialize makes');
  // a corrupt chunk refuses (the caller falls back to a whole materialize)
  const c = join(d, 'again.img');
  await engine.materialize(a, c);
  const victim = join(store.where, ...blobKeys.chunk(b.chunks.find(([i]) => i === 6)![1]).split('/'));
  const good = readFileSync(victim);
  const bad = Buffer.from(good);
  bad[bad.length - 5] ^= 1;
  writeFileSync(victim, bad);
  await rejects(
    () => engine.patch(a, b, c),
    (e: unknown) => e instanceof CorruptBlobError,
  );
  writeFileSync(victim, good);
  // another size is not patched
  image(img, 32 * MiB, [[0, randomBytes(MiB)]]);
  const small = await engine.write(meta(), img);
  await rejects(
    () => engine.patch(a, small, c),
    (e: unknown) => e instanceof BaseMismatch,
  );
});

test('a checkpoint right after another of the same server looks for none of the chunks that one named, unless its manifest is gone', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const heads: string[] = [];
  const counting = Object.assign(Object.create(store) as BlobStore, { has: (k: string) => (heads.push(k), store.has(k)) });
  const engine = engineOn(counting);
  const img = join(d, 'disk.img');
  image(img, 64 * MiB, [[0, randomBytes(10 * MiB)]]);
  const first = await engine.write(meta(), img);
  assert.is(heads.filter((k) => k.startsWith('chunks/')).length, 10, 'the first looks for each chunk');
  image(img, 64 * MiB, [[2 * MiB, randomBytes(MiB)]]);
  heads.length = 0;
  const second = await engine.write(meta(), img);
  assert.is(heads.filter((k) => k.startsWith('chunks/')).length, 1, 'only the changed chunk looked for');
  assert.is(second.newBytes > 0 && second.newBytes < 1.1 * MiB, true, `${second.newBytes}`);
  const out = join(d, 'out.img');
  await engine.materialize(second, out);
  assert.is(sha(out), sha(img));
  // its manifest gone (deleted; a sweep may have taken its chunks): every chunk looked for again
  await engine.remove('srv_a', second.id);
  await engine.remove('srv_a', first.id);
  await collect(engine);
  heads.length = 0;
  const third = await engine.write(meta(), img);
  assert.is(heads.filter((k) => k.startsWith('chunks/')).length, 10);
  assert.is(third.newBytes > 9 * MiB, true, 'the swept chunks stored again');
  await engine.materialize(third, out);
  assert.is(sha(out), sha(img));
});

/** A store that fails the manifest's put: a checkpoint killed after its chunks. */
const failingManifests = (s: BlobStore): BlobStore =>
  Object.assign(Object.create(s) as BlobStore, {
    put: (k: string, b: Uint8Array) => (k.startsWith('manifests/') ? Promise.reject(new Error('killed')) : s.put(k, b)),
    delete: (k: string) => (k.startsWith('pending/') ? Promise.resolve() : s.delete(k)),
  });

test('the collector removes chunks no manifest names, after a killed checkpoint grows stale', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const engine = engineOn(store);
  const img = join(d, 'disk.img');
  image(img, 64 * MiB, [[0, randomBytes(3 * MiB)]]);
  const a = await engine.write(meta(), img);
  image(img, 64 * MiB, [[10 * MiB, randomBytes(2 * MiB)]]);
  const b = await engine.write(meta(), img);
  image(img, 64 * MiB, [[20 * MiB, randomBytes(2 * MiB)]]);
  await rejects(() => engineOn(failingManifests(store)).write(meta(), img), /killed/);
  assert.is(walk(join(store.where, 'pending')).length, 1, 'the killed checkpoint left its marker');

  let r = await collect(engine);
  assert.not.ok(r.swept, 'a pending checkpoint younger than the grace period holds the sweep');
  clockNow += 61_000;
  await engine.remove('srv_a', a.id);
  r = await collect(engine);
  assert.ok(r.swept);
  assert.is(r.stale, 1);
  assert.is(r.removed, 2, 'the killed checkpoint’s two chunks; a’s chunks are b’s too');
  assert.is(r.live, 5);
  const out = join(d, 'b.img');
  await engine.materialize(b, out);
  r = await collect(engine);
  assert.is(r.removed, 0);
  await engine.remove('srv_a', b.id);
  r = await collect(engine);
  assert.is(r.removed, 5);
  assert.is(await storedBytes(store), 0);
});

test('a checkpoint that finds an unreferenced chunk in the store keeps it from a concurrent sweep', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 16 * MiB, [[0, randomBytes(2 * MiB)]]);
  await rejects(() => engineOn(failingManifests(store)).write(meta(), img));
  clockNow += 61_000; // its marker is stale: its two chunks are unreferenced, ready to be swept

  // 1. the checkpoint first: it finds the chunks, then the sweep runs before its manifest
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let found!: () => void;
  const foundOne = new Promise<void>((r) => (found = r));
  const slow = Object.assign(Object.create(store) as BlobStore, {
    has: async (k: string) => {
      const h = await store.has(k);
      if (h) (found(), await gate);
      return h;
    },
  });
  const running = engineOn(slow).write(meta(), img);
  await foundOne;
  const r = await collect(engineOn(store));
  assert.not.ok(r.swept);
  release();
  const m = await running;
  await engineOn(store).materialize(m, join(d, 'one.img'));
  assert.is(sha(join(d, 'one.img')), sha(img));

  // 2. the sweep first: a checkpoint that starts meanwhile waits for it, then uploads anew
  await engineOn(store).remove('srv_a', m.id);
  let sweepGate!: () => void;
  const sweeping = new Promise<void>((r) => (sweepGate = r));
  let locked!: () => void;
  const lockTaken = new Promise<void>((r) => (locked = r));
  const pausedGc = Object.assign(Object.create(store) as BlobStore, {
    put: async (k: string, b: Uint8Array) => {
      await store.put(k, b);
      if (k.startsWith('gc/locks/')) (locked(), await sweeping);
    },
  });
  const gc = collect(engineOn(pausedGc));
  await lockTaken;
  const waiting = engineOn(store).write(meta(), img);
  await new Promise((r) => setTimeout(r, 50));
  sweepGate();
  assert.ok((await gc).removed >= 0);
  const m2 = await waiting;
  await engineOn(store).materialize(m2, join(d, 'two.img'));
  assert.is(sha(join(d, 'two.img')), sha(img));
});

test('a killed run’s marker and lock are dead at once for the next run of the same owner: it sweeps and checkpoints without waiting out the grace period', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const run = (owner: string, on: BlobStore = store) =>
    new CheckpointEngine({
      store: on,
      secret: secret(),
      owner,
      now: () => clockNow,
      sleep: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 5))),
      staleMs: 3_600_000,
    });
  const img = join(d, 'disk.img');
  image(img, 16 * MiB, [[0, randomBytes(2 * MiB)]]);
  // the killed run: its checkpoint cut off after its chunks (the marker left), its collection
  // cut off in its sweep (the lock left)
  const killed = run('host-a:/data', failingManifests(store));
  await rejects(() => killed.write(meta(), img));
  await store.put(killed.lockKey, killed.stamp({ at: clockNow }));
  assert.is(walk(join(store.where, 'pending')).length, 1);

  // another host's live checkpoint still holds the sweep, as before
  const other = run('host-b:/data');
  await store.put(blobKeys.pending('ckp_other'), other.stamp({ startedAt: clockNow, serverId: 'srv_b' }));
  const next = run('host-a:/data');
  let r = await collect(next);
  assert.not.ok(r.swept, 'a live checkpoint of another owner holds the sweep');
  assert.is(r.stale, 1, 'the killed run’s own marker is removed at once');
  await store.delete(blobKeys.pending('ckp_other'));

  // the same owner's next run: nothing to wait out (the grace period is an hour)
  await store.put(killed.lockKey, killed.stamp({ at: clockNow }));
  const started = Date.now();
  const m = await next.write(meta(), img);
  assert.ok(Date.now() - started < 5_000, 'the killed collection’s lock is not waited for');
  r = await collect(next);
  assert.ok(r.swept);
  assert.is(r.removed, 0, 'the chunks the new checkpoint names stay');
  await next.remove('srv_a', m.id);
  r = await collect(next);
  assert.is(r.removed, 2, 'and go once nothing names them');
  // another owner's lock of the same age is waited for (the collector may be running)
  await store.put(other.lockKey, other.stamp({ at: clockNow }));
  const waited = run('host-a:/data');
  const timeout = Symbol('waiting');
  const writing = waited.write(meta(), img);
  const raced = await Promise.race([writing, new Promise((r) => setTimeout(() => r(timeout), 300))]);
  assert.is(raced, timeout, 'a live lock of another owner holds a checkpoint');
  await store.delete(other.lockKey);
  await writing;
});

test('a checkpoint of this run that outlasts the grace period still holds its own run’s sweep', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 16 * MiB, [[0, randomBytes(2 * MiB)]]);
  await rejects(() => engineOn(failingManifests(store)).write(meta(), img));
  clockNow += 61_000; // that one's marker is stale: its two chunks are unreferenced
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let found!: () => void;
  const foundOne = new Promise<void>((r) => (found = r));
  const slow = Object.assign(Object.create(store) as BlobStore, {
    has: async (k: string) => {
      const h = await store.has(k);
      if (h) (found(), await gate);
      return h;
    },
  });
  const long = new CheckpointEngine({ store: slow, secret: secret(), owner: 'host-a:/data', now: () => clockNow, staleMs: 60_000 });
  const running = long.write(meta(), img);
  await foundOne; // it found the unreferenced chunks and will name them
  clockNow += 3_600_000; // and it is still running an hour later (a large disk, a slow store)
  const r = await collect(long);
  assert.not.ok(r.swept, 'its marker is live: this process is writing it');
  release();
  const m = await running;
  await long.materialize(m, join(d, 'long.img'));
  assert.is(sha(join(d, 'long.img')), sha(img));
  assert.ok((await collect(long)).swept, 'once it ended the sweep runs');
});

test('a put killed half-way in the directory store leaves a temporary file the collector removes once it is older than the run', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  const engine = engineOn(store);
  const m = await engine.write(meta(), img);
  // what a kill -9 inside put() leaves: the temporary file beside its target, never renamed
  const chunkDir = join(store.where, ...blobKeys.chunk(m.chunks[0][1]).split('/').slice(0, -1));
  const killed = join(chunkDir, `.${'a'.repeat(64)}.0123456789ab.tmp`);
  const live = join(chunkDir, `.${'b'.repeat(64)}.0123456789ab.tmp`);
  writeFileSync(killed, randomBytes(1000));
  writeFileSync(live, randomBytes(1000));
  const past = new Date(Date.now() - 3_600_000);
  utimesSync(killed, past, past); // written by a run before this one
  const r = await collect(engine);
  assert.ok(r.swept);
  assert.is(r.temp, 1);
  assert.not.ok(existsSync(killed), 'the killed put’s file is gone');
  assert.ok(existsSync(live), 'a temporary file of this run (a put under way) stays');
  await engine.materialize(m, join(d, 'out.img'));
  assert.is(sha(join(d, 'out.img')), sha(img));
});

test('a store that cannot be reached answers 503 store_unavailable with Retry-After, and the disk stays as it was', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 16 * MiB, [[0, randomBytes(MiB)]]);
  // the runtime's two disk operations, on a plain image file
  const disk = {
    captureDisk: async <T>(_id: string, use: (c: { path: string; pausedMs: number; method: 'copy'; uidBase: number; writtenAt: number }) => Promise<T>) => {
      copyFileSync(img, `${img}.ckp`);
      return use({ path: `${img}.ckp`, pausedMs: 0, method: 'copy', uidBase: 0, writtenAt: 0 });
    },
    replaceDisk: async (_id: string, fill: (p: string) => Promise<void>) => {
      await fill(`${img}.new`);
      renameSync(`${img}.new`, img);
    },
  };
  let away = false;
  const flaky = Object.assign(Object.create(store) as BlobStore, {
    put: (k: string, b: Uint8Array) => (away ? Promise.reject(new StoreUnavailableError('connection refused')) : store.put(k, b)),
    get: (k: string) => (away ? Promise.reject(new StoreUnavailableError('connection refused')) : store.get(k)),
  });
  const cps = new Checkpoints(engineOn(flaky), disk);
  const { manifest } = await cps.take('srv_a', meta().settings, 'manual');
  const before = sha(img);
  image(img, 16 * MiB, [[0, randomBytes(MiB)]]);
  const changed = sha(img);
  assert.is.not(changed, before);
  away = true;
  for (const op of [() => cps.take('srv_a', meta().settings, 'manual'), () => cps.restore('srv_a', manifest.id)]) {
    const e = await op().then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(e instanceof AppError, String(e));
    assert.is(e.code, 'store_unavailable');
    assert.is(e.headers?.['retry-after'], '30');
  }
  assert.is(sha(img), changed, 'the disk is untouched');
  away = false;
  await cps.restore('srv_a', manifest.id);
  assert.is(sha(img), before);
});

test.run();
