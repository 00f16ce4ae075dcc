// The checkpoint engine and service when things overlap or fail half-way, over the directory
// store on plain image files (no server, no root): two collectors of one store (every host of a
// cluster collects it), two collections in one process, a marker or lock whose write fails, a
// sweep that outlasts a checkpoint's wait, a damaged checkpoint deleted, two restores of one
// server at once, and the owner a data dir's markers carry.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  readdirSync,
  ftruncateSync,
  mkdtempSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError } from '../../src/errors.js';
import { statusOf } from '../../src/http/errors.js';
import type { Runtime } from '../../src/runtime/index.js';
import { diskPaths } from '../../src/runtime/disk.js';
import { stagedPath, thawLeftovers } from '../../src/runtime/diskcopy.js';
import {
  CheckpointEngine,
  Checkpoints,
  collect,
  DirBlobStore,
  newCheckpointId,
  blobKeys,
  startCheckpoints,
  type BlobStore,
  type S3Settings,
  type NewCheckpoint,
} from '../../src/checkpoints/index.js';

const MiB = 1 << 20;
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-ckr-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const secret = () => ({ key: async () => Buffer.alloc(32, 7) });
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
let clockNow = 1_800_000_000_000;
const engine = (store: BlobStore, owner?: string, now = () => clockNow) =>
  new CheckpointEngine({ store, secret: secret(), owner, now, sleep: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 5))), staleMs: 3_600_000 });
const meta = (serverId = 'srv_a'): NewCheckpoint => ({
  id: newCheckpointId(clockNow++),
  serverId,
  createdAt: clockNow,
  kind: 'manual',
  settings: { tier: 'free', image: 'base-abc', slug: 'blog', runSh: true },
});
function image(path: string, size: number, writes: [number, Buffer][]): void {
  const fd = openSync(path, existsSync(path) ? 'r+' : 'w');
  try {
    ftruncateSync(fd, size);
    for (const [off, b] of writes) writeSync(fd, b, 0, b.length, off);
  } finally {
    closeSync(fd);
  }
}
const gate = () => {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
};
const TIMEOUT = Symbol('still waiting');
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, new Promise<typeof TIMEOUT>((r) => setTimeout(() => r(TIMEOUT), ms))]);
/** A store whose collector-lock put pauses (after writing) until `release`. */
const pausingLocks = (s: BlobStore, taken: () => void, release: Promise<void>): BlobStore =>
  Object.assign(Object.create(s) as BlobStore, {
    put: async (k: string, b: Uint8Array) => {
      await s.put(k, b);
      if (k.startsWith('gc/lock')) (taken(), await release);
    },
  });

test('two collectors of one store: the one that ends first leaves the other’s lock, and a checkpoint waits for it', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const taken = gate();
  const release = gate();
  const a = collect(engine(pausingLocks(store, taken.open, release.p), 'host-a'));
  await taken.p; // host A sweeps
  const b = await collect(engine(store, 'host-b')); // host B collects and ends meanwhile
  assert.ok(b.swept);
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  const writing = engine(store, 'host-c').write(meta(), img);
  assert.ok((await within(writing, 300)) === TIMEOUT, 'a checkpoint waits while host A still sweeps');
  release.open();
  await a; // it sees the checkpoint's marker and sweeps nothing this time
  const m = await writing;
  await engine(store).materialize(m, join(d, 'out.img'));
  assert.is(sha(join(d, 'out.img')), sha(img));
  const left: string[] = [];
  for await (const { key } of store.list('gc/')) left.push(key);
  assert.equal(left, [], 'each collector removed its own lock');
});

test('one process runs one collection at a time', async () => {
  const store = new DirBlobStore(join(tmp(), 'checkpoints'));
  let puts = 0;
  const taken = gate();
  const release = gate();
  const counting = pausingLocks(
    Object.assign(Object.create(store) as BlobStore, { put: (k: string, b: Uint8Array) => (k.startsWith('gc/lock') && puts++, store.put(k, b)) }),
    taken.open,
    release.p,
  );
  const e = engine(counting, 'host-a');
  const first = collect(e);
  await taken.p;
  const second = collect(e);
  await new Promise((r) => setTimeout(r, 100));
  assert.is(puts, 1, 'the second collection has not started while the first sweeps');
  release.open();
  assert.ok((await first).swept);
  assert.ok((await second).swept);
  assert.is(puts, 2);
});

test('a pending marker whose write failed does not hold the collector for the rest of the process', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  // the marker reaches the store but its put reports a failure (a timeout after the write)
  const flaky = Object.assign(Object.create(store) as BlobStore, {
    put: async (k: string, b: Uint8Array) => {
      await store.put(k, b);
      if (k.startsWith('pending/')) throw new Error('timed out');
    },
    delete: (k: string) => (k.startsWith('pending/') ? Promise.resolve() : store.delete(k)), // and its removal is lost too
  });
  const e = engine(flaky, 'host-a');
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  let failed = false;
  await e.write(meta(), img).catch(() => (failed = true));
  assert.ok(failed);
  const r = await collect(e);
  assert.ok(r.swept, 'the marker of a write that failed is not live');
  assert.is(r.stale, 1);
});

test('a collector lock whose write failed does not hold this process’s checkpoints', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const flaky = Object.assign(Object.create(store) as BlobStore, {
    put: async (k: string, b: Uint8Array) => {
      await store.put(k, b);
      if (k.startsWith('gc/lock')) throw new Error('timed out');
    },
    delete: (k: string) => (k.startsWith('gc/lock') ? Promise.resolve() : store.delete(k)),
  });
  const e = engine(flaky, 'host-a');
  let failed = false;
  await collect(e).catch(() => (failed = true));
  assert.ok(failed);
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  assert.is.not(await within(e.write(meta(), img), 3000), TIMEOUT, 'the lock left by a failed collection of this process is dead');
});

test('a sweep that holds the store past the checkpoint’s wait answers 503 store_busy with Retry-After', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const taken = gate();
  const release = gate();
  const gc = collect(engine(pausingLocks(store, taken.open, release.p), 'host-b'));
  await taken.p;
  let t = clockNow;
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  const e = await engine(store, 'host-a', () => (t += 5_000))
    .write(meta(), img)
    .then(
      () => undefined,
      (x: unknown) => x,
    );
  release.open();
  await gc;
  assert.ok(e instanceof AppError, String(e));
  assert.is(e.code, 'store_busy');
  assert.is(statusOf(e.kind), 503);
  assert.ok(Number(e.headers?.['retry-after']) > 0);
});
test('a second restore of a server while one runs answers 409 restore_in_progress, and each restore stages its own file', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  const p = diskPaths(d);
  const filling = gate();
  const hold = gate();
  const staged: string[] = [];
  // the runtime's two disk operations on a plain image file, with diskcopy's staged names
  const disk = {
    captureDisk: async <T>(_id: string, use: (c: { path: string; pausedMs: number; method: 'copy'; uidBase: number; writtenAt: number }) => Promise<T>) =>
      use({ path: img, pausedMs: 0, method: 'copy', uidBase: 0, writtenAt: 0 }),
    replaceDisk: async (_id: string, fill: (p: string) => Promise<void>) => {
      const at = stagedPath(p);
      staged.push(at);
      await fill(at);
      filling.open();
      await hold.p; // the first restore is still flushing and swapping
      renameSync(at, img);
    },
  };
  const cps = new Checkpoints(engine(store), disk);
  const { manifest } = await cps.take('srv_a', meta().settings, 'manual');
  const want = sha(img);
  image(img, 8 * MiB, [[0, randomBytes(MiB)]]);
  const first = cps.restore('srv_a', manifest.id);
  await filling.p;
  const second = cps.restore('srv_a', manifest.id).then(
    () => undefined,
    (x: unknown) => x,
  );
  const e = await within(second, 2000);
  if (e === TIMEOUT) hold.open(); // today's code: the second restore runs over the first
  assert.ok(e instanceof AppError, String(e));
  assert.is(e.code, 'restore_in_progress');
  assert.is(statusOf(e.kind), 409);
  hold.open();
  await first;
  assert.is(sha(img), want);
  await cps.restore('srv_a', manifest.id); // and once it answered, the next one runs
  assert.is(staged.length, 2);
  assert.is.not(staged[0], staged[1], 'two restores never stage the same file');
  // what a killed restore left is removed where the runtime cleans at start
  writeFileSync(join(d, 'disk.img.new'), 'old name');
  writeFileSync(`${stagedPath(p)}`, 'killed restore');
  await thawLeftovers(p);
  assert.equal(
    readdirSync(d).filter((n) => n.startsWith('disk.img.new')),
    [],
  );
  assert.ok(existsSync(img));
});

test('a damaged checkpoint can be deleted: its manifest goes unopened and its chunks to the collector', async () => {
  const d = tmp();
  const store = new DirBlobStore(join(d, 'checkpoints'));
  const img = join(d, 'disk.img');
  image(img, 8 * MiB, [[0, randomBytes(2 * MiB)]]);
  const nodisk = { captureDisk: undefined, replaceDisk: undefined };
  const e = engine(store, 'host-a');
  const cps = new Checkpoints(e, nodisk);
  const m = await e.write(meta(), img);
  const at = join(store.where, ...blobKeys.manifest('srv_a', m.id).split('/'));
  const bytes = readFileSync(at);
  bytes[bytes.length - 3] ^= 1;
  writeFileSync(at, bytes);
  await cps.remove('srv_a', m.id);
  assert.not.ok(existsSync(at), 'the damaged manifest is gone');
  const gone = await cps.remove('srv_a', m.id).then(
    () => undefined,
    (x: unknown) => x,
  );
  assert.ok(gone instanceof AppError && gone.code === 'checkpoint_not_found', String(gone));
  assert.is((await collect(e)).removed, 2, 'its chunks are collected');
});

test('the owner a data dir’s markers carry is its own random id, not the host’s name and path', async () => {
  const dataDir = tmp();
  const parts = { cfg: { dataDir, checkpoints: { s3: {} as S3Settings } }, runtime: {} as Runtime };
  const store = new DirBlobStore(join(dataDir, 'checkpoints'));
  const production = startCheckpoints(parts, store).engine;
  const ownerOf = (e: CheckpointEngine) => (JSON.parse(e.stamp({}).toString()) as { owner?: string }).owner;
  assert.ok(ownerOf(production));
  assert.is(ownerOf(startCheckpoints(parts, store).engine), ownerOf(production), 'the same data dir keeps its owner across starts');
  await store.put(blobKeys.pending(newCheckpointId(clockNow)), production.stamp({ startedAt: clockNow, serverId: 'srv_a' }));
  // a recovery drill box: the same hostname and data dir path, its own data dir (rebuilt fresh)
  for (const n of readdirSync(dataDir)) if (n !== 'checkpoints') rmSync(join(dataDir, n), { recursive: true });
  const drill = startCheckpoints(parts, store).engine;
  assert.is.not(ownerOf(drill), ownerOf(production), 'another data dir at the same path is another owner');
  const r = await collect(drill);
  assert.is(r.stale, 0, 'the drill does not take production’s live marker for its own killed run’s');
  assert.not.ok(r.swept);
  const id = readdirSync(dataDir).filter((n) => n !== 'checkpoints');
  assert.is(id.length, 1);
  assert.is(statSync(join(dataDir, id[0])).mode & 0o777, 0o600);
});

test.run();
