// The checkpoint engine over a BlobStore: an image file (a consistent copy of a server's disk,
// taken by the runtime) in, a manifest and its chunks out; and back. It knows files and blobs, not
// servers' lifecycles (service.ts joins it to the runtime).
//
// write(): the image is cut into fixed-size chunks (CHUNK_SIZE); a chunk of zeroes (a hole, or
// freed blocks) is skipped; every other chunk is named by its keyed hash and sealed (seal.ts) and
// uploaded only when the store does not have it — so a checkpoint costs what changed since any
// earlier one (of any server on the same secret). A pending marker is written first and removed
// last, the manifest just before: a checkpoint killed half-way leaves no manifest, and its chunks
// are collected by gc.ts, which never sweeps while a checkpoint is pending (see gc.ts).
// materialize(): every chunk fetched, opened and checked against its name before the image is
// complete; any missing or corrupt one refuses (CorruptBlobError, MissingBlobError) and the
// half-written file is removed — the caller swaps a complete image in or nothing. A restore has
// the runtime flush the image beside the server's stop instead of before it.

import { randomBytes } from 'node:crypto';
import { open, rm, stat } from 'node:fs/promises';
import { AppError } from '../errors.js';
import type { BlobStore } from './blobs.js';
import { keys, parseManifest, type Manifest } from './manifest.js';
import { CorruptBlobError, Sealer, type CheckpointSecret } from './seal.js';

/** 1 MiB: a 10 MiB file written into a server's ext4 stored 10.01 MiB (1.00×, measured in
 *  test/checkpoints/capture.test.ts: ext4 allocates a new file's blocks contiguously, and its
 *  metadata changes touch few chunks); smaller chunks cost more requests, larger ones more bytes
 *  for a scattered change. */
export const CHUNK_SIZE = 1 << 20;
/** Uploads (or downloads) in flight at once for one checkpoint (an object store's latency). */
const PARALLEL = 4;
/** How long a checkpoint waits for a collector's sweep to end before giving up (503 store_busy). */
const GC_WAIT_MS = 60_000;
/** Seconds a client waits before retrying a checkpoint a long sweep held. */
const BUSY_RETRY_S = 30;

/** Servers whose newest checkpoint's chunk ids an engine keeps (write(): no HEAD for those). */
const KNOWN_SERVERS = 32;

/** A patch asked of an image whose base checkpoint has another size or chunk size. */
export class BaseMismatch extends Error {
  constructor(detail: string) {
    super(`the base checkpoint does not fit: ${detail}`);
    this.name = 'BaseMismatch';
  }
}

/** A chunk the manifest names that the store does not have. */
export class MissingBlobError extends Error {
  constructor(readonly key: string) {
    super(`checkpoint blob ${key} is missing`);
    this.name = 'MissingBlobError';
  }
}

export interface EngineDeps {
  store: BlobStore;
  secret: CheckpointSecret;
  now?: () => number;
  chunkSize?: number;
  /** A marker or lock older than this is a killed writer's (gc.ts); default 1 h. */
  staleMs?: number;
  /** Who writes through this engine (one host's data dir): its markers and locks carry it with
   *  this process's run, so one of an earlier run of the same owner — a daemon killed meanwhile —
   *  is known dead at once instead of after staleMs (gc.ts). */
  owner?: string;
  sleep?: (ms: number) => Promise<void>;
}

export type NewCheckpoint = Omit<Manifest, 'v' | 'imageBytes' | 'chunkSize' | 'chunks' | 'dataBytes' | 'newBytes' | 'storedBytes'>;

/** Runs `fn` over `items` with at most `n` at once; the first failure rejects (after the others settle). */
export async function eachLimited<T>(items: AsyncIterable<T> | Iterable<T>, n: number, fn: (t: T) => Promise<void>): Promise<void> {
  const running = new Set<Promise<void>>();
  let failed: unknown;
  for await (const item of items) {
    if (failed !== undefined) break;
    const p: Promise<void> = fn(item).then(
      () => void running.delete(p),
      (e: unknown) => {
        running.delete(p);
        failed ??= e;
      },
    );
    running.add(p);
    if (running.size >= n) await Promise.race(running);
  }
  await Promise.all(running);
  if (failed !== undefined) throw failed;
}

let zeroes = Buffer.alloc(0);
/** Whether a buffer holds only zero bytes (one memcmp against a shared zero buffer). */
const isZero = (b: Buffer) => {
  if (zeroes.length < b.length) zeroes = Buffer.alloc(b.length);
  return b.equals(zeroes.subarray(0, b.length));
};

/** Byte ranges [start, end) of an image that may hold data (its extents: the runtime reads them
 *  with FIEMAP); outside them the image is holes. Without them every chunk is read. */
export type DataRanges = readonly (readonly [number, number])[];

/** The indexes of the chunks the ranges touch, in order. */
function touched(ranges: DataRanges, chunkSize: number, size: number): number[] {
  const out = new Set<number>();
  for (const [a, b] of ranges) {
    const end = Math.min(b, size);
    for (let i = Math.floor(a / chunkSize); i * chunkSize < end; i++) out.add(i);
  }
  return [...out].sort((x, y) => x - y);
}

/** The non-zero chunks of an image file, in order: index and bytes (a fresh buffer each). */
export async function* chunksOf(path: string, chunkSize: number, ranges?: DataRanges): AsyncGenerator<{ index: number; bytes: Buffer }> {
  const fh = await open(path, 'r');
  try {
    const size = (await fh.stat()).size;
    const all = Math.ceil(size / chunkSize);
    const indexes = ranges ? touched(ranges, chunkSize, size) : Array.from({ length: all }, (_, i) => i);
    for (const index of indexes) {
      const len = Math.min(chunkSize, size - index * chunkSize);
      const buf = Buffer.allocUnsafe(len);
      let got = 0;
      while (got < len) {
        const { bytesRead } = await fh.read(buf, got, len - got, index * chunkSize + got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      if (got < len) buf.fill(0, got);
      if (!isZero(buf)) yield { index, bytes: buf };
    }
  } finally {
    await fh.close();
  }
}

export class CheckpointEngine {
  readonly store: BlobStore;
  readonly chunkSize: number;
  readonly staleMs: number;
  private sealer?: Promise<Sealer>;
  readonly now: () => number;
  /** This process's run: with the owner, on every marker and lock it writes. */
  readonly run = randomBytes(8).toString('hex');
  /** When this run began (by `now`): a temporary blob older than it is a killed put's. */
  readonly startedAt: number;
  private readonly sleep: (ms: number) => Promise<void>;

  /** The owner this engine's markers and locks carry (start.ts: the data dir's id). */
  readonly owner?: string;
  /** Per server (the last KNOWN_SERVERS), the newest checkpoint this engine wrote and its chunk ids. */
  private readonly lastWritten = new Map<string, { id: string; chunks: ReadonlySet<string> }>();

  constructor(private readonly deps: EngineDeps) {
    this.owner = deps.owner;
    this.store = deps.store;
    this.chunkSize = deps.chunkSize ?? CHUNK_SIZE;
    this.staleMs = deps.staleMs ?? 3_600_000;
    this.now = deps.now ?? Date.now;
    this.startedAt = this.now();
    this.sleep = deps.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  }

  /** The sealer under the secret's key, read once; a key that could not be read (the cluster
   *  registry away at a host's start) is read again at the next call, not kept as a failure. */
  seal(): Promise<Sealer> {
    this.sealer ??= this.deps.secret.key().then(
      (k) => new Sealer(k),
      (err: unknown) => {
        this.sealer = undefined;
        throw err;
      },
    );
    return this.sealer;
  }

  /** Stores the image as checkpoint `cp.id` of `cp.serverId`; resolves with its manifest once the
   *  manifest is written (the checkpoint exists from then on). A chunk the server's previous
   *  checkpoint by this engine names is not looked for in the store when that manifest is still
   *  there once this one's marker is written and no sweep runs: no sweep can start from then on
   *  (gc.ts), so every chunk it names stays (a running server's move: its final checkpoint right
   *  after the one taken while it ran, ~100 HEADs fewer on the held path). */
  async write(cp: NewCheckpoint, image: string, ranges?: DataRanges): Promise<Manifest> {
    const sealer = await this.seal();
    try {
      this.writing.add(cp.id);
      await this.store.put(keys.pending(cp.id), this.stamp({ startedAt: this.now(), serverId: cp.serverId }));
      await this.waitForSweep();
      const prev = this.lastWritten.get(cp.serverId);
      const known = prev && (await this.store.has(keys.manifest(cp.serverId, prev.id))) ? prev.chunks : undefined;
      const chunks: [number, string][] = [];
      const sizes = new Map<string, number>();
      let dataBytes = 0;
      let newBytes = 0;
      const imageBytes = (await stat(image)).size;
      await eachLimited(chunksOf(image, this.chunkSize, ranges), PARALLEL, async ({ index, bytes }) => {
        dataBytes += bytes.length;
        const id = sealer.chunkId(bytes);
        chunks.push([index, id]);
        if (sizes.has(id)) return;
        sizes.set(id, 0);
        const key = keys.chunk(id);
        if (known?.has(id) || (await this.store.has(key))) {
          sizes.set(id, bytes.length); // an estimate: the stored blob's size is not read back
          return;
        }
        const sealed = sealer.seal(bytes, key);
        await this.store.put(key, sealed);
        sizes.set(id, sealed.length);
        newBytes += sealed.length;
      });
      chunks.sort((a, b) => a[0] - b[0]);
      let storedBytes = 0;
      for (const s of sizes.values()) storedBytes += s;
      const m: Manifest = { v: 1, ...cp, imageBytes, chunkSize: this.chunkSize, chunks, dataBytes, newBytes, storedBytes };
      const key = keys.manifest(cp.serverId, cp.id);
      await this.store.put(key, sealer.seal(Buffer.from(JSON.stringify(m)), key));
      this.lastWritten.delete(cp.serverId);
      this.lastWritten.set(cp.serverId, { id: cp.id, chunks: new Set(chunks.map(([, id]) => id)) });
      if (this.lastWritten.size > KNOWN_SERVERS) this.lastWritten.delete(this.lastWritten.keys().next().value!);
      return m;
    } finally {
      this.writing.delete(cp.id);
      await this.store.delete(keys.pending(cp.id)).catch(() => {}); // a stale marker is the collector's
    }
  }

  /** A marker's or lock's body: its fields, this engine's owner and run. */
  stamp(fields: Record<string, unknown>): Buffer {
    return Buffer.from(JSON.stringify({ ...fields, ...(this.deps.owner ? { owner: this.deps.owner, run: this.run } : {}) }));
  }

  /** Whether a marker or lock (its parsed body) is a killed or finished writer's. One of this
   *  engine's owner: of an earlier run, dead (that process is gone: one daemon per data dir); of
   *  this run, dead unless this process is writing it now (`live`), however long that takes —
   *  a checkpoint of a large disk to a slow store may outlast staleMs. Another owner's: dead once
   *  older than staleMs. */
  dead(body: Record<string, unknown>, at: number, live: boolean): boolean {
    if (this.deps.owner !== undefined && body.owner === this.deps.owner) return body.run !== this.run || !live;
    return !Number.isFinite(at) || this.now() - at > this.staleMs;
  }

  /** Checkpoints this process is writing now (their pending markers are live). */
  readonly writing = new Set<string>();
  /** Collections this process is running now (its lock is live while there is one). */
  sweeping = 0;
  /** This process's collections, one after another (gc.ts): they share one lock key. */
  gcQueue: Promise<unknown> = Promise.resolve();

  /** This engine's collector lock key: its owner (in key characters) and run, so no other
   *  collector removes it (the body carries the owner as it is). */
  get lockKey(): string {
    return keys.gcLock(`${(this.deps.owner ?? 'anon').replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 100)}-${this.run}`);
  }

  /** Whether the owner-and-run-stamped lock of a collector (its parsed body) is live. */
  private lockLive(key: string, body: Record<string, unknown>): boolean {
    return !this.dead(body, Number(body.at), key === this.lockKey && this.sweeping > 0);
  }

  /** The collector locks in the store: key and whether it is live (a dead one is a killed
   *  collector's; a body no collector wrote whole counts as dead). */
  async locks(): Promise<{ key: string; live: boolean }[]> {
    const out: { key: string; live: boolean }[] = [];
    for await (const { key } of this.store.list(keys.gcLockPrefix)) {
      const blob = await this.store.get(key);
      if (!blob) continue;
      let body: Record<string, unknown> | null = null;
      try {
        body = JSON.parse(Buffer.from(blob).toString()) as Record<string, unknown> | null;
      } catch {
        body = null;
      }
      out.push({ key, live: body !== null && typeof body === 'object' && this.lockLive(key, body) });
    }
    return out;
  }

  /** Waits while any collector sweeps (gc.ts: the locks), so no chunk this checkpoint finds in
   *  the store is deleted before the manifest names it. A killed collector's lock is not waited
   *  for; a sweep that holds the store past GC_WAIT_MS answers 503 store_busy. */
  private async waitForSweep(): Promise<void> {
    const until = this.now() + GC_WAIT_MS;
    for (;;) {
      if (!(await this.locks()).some((l) => l.live)) return;
      if (this.now() > until) throw AppError.of('store_busy', 'the checkpoint store is being cleaned up; try again shortly', { retryAfter: BUSY_RETRY_S });
      await this.sleep(100);
    }
  }

  /** The manifest of one checkpoint, or null when there is none. */
  async read(serverId: string, id: string): Promise<Manifest | null> {
    const key = keys.manifest(serverId, id);
    const blob = await this.store.get(key);
    if (!blob) return null;
    const sealer = await this.seal();
    const m = parseManifest(sealer.open(blob, key, 64 << 20).toString());
    if (m.id !== id || m.serverId !== serverId) throw new CorruptBlobError(key);
    return m;
  }

  /** Every checkpoint of a server (or of every server), newest first. */
  async list(serverId?: string): Promise<Manifest[]> {
    const out: Manifest[] = [];
    for await (const { key } of this.store.list(keys.manifests(serverId))) {
      const [, srv, id] = key.split('/');
      const m = await this.read(srv, id);
      if (m) out.push(m);
    }
    return out.sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  }

  /** Whether the store holds the checkpoint's manifest (not opened: it may be damaged). */
  exists(serverId: string, id: string): Promise<boolean> {
    return this.store.has(keys.manifest(serverId, id));
  }

  /** Forgets a checkpoint (its chunks stay until the collector finds them unreferenced). */
  async remove(serverId: string, id: string): Promise<void> {
    await this.store.delete(keys.manifest(serverId, id));
  }

  /** Turns `file`, the image of checkpoint `base` (materialize()d, untouched since), into the
   *  image of `m`: every chunk whose id differs fetched, checked as materialize checks it and
   *  written; every chunk `base` has and `m` does not zeroed; flushed (fsync). Chunks of equal id
   *  hold equal bytes (the id is their keyed hash): the result is byte for byte materialize(m).
   *  Throws BaseMismatch when the two differ in size or chunk size, and any error of a chunk as
   *  materialize does — `file` is then half-patched, the caller's to remove. */
  async patch(base: Manifest, m: Manifest, file: string): Promise<{ fetched: number; zeroed: number; chunks: number }> {
    if (base.imageBytes !== m.imageBytes || base.chunkSize !== m.chunkSize)
      throw new BaseMismatch(`${base.imageBytes}/${base.chunkSize} bytes, not ${m.imageBytes}/${m.chunkSize}`);
    const sealer = await this.seal();
    const had = new Map(base.chunks);
    const want = (index: number) => Math.min(m.chunkSize, m.imageBytes - index * m.chunkSize);
    const changed = m.chunks.filter(([index, id]) => had.get(index) !== id);
    const now = new Set(m.chunks.map(([index]) => index));
    const gone = base.chunks.filter(([index]) => !now.has(index)).map(([index]) => index);
    const fh = await open(file, 'r+');
    try {
      if ((await fh.stat()).size !== m.imageBytes) throw new BaseMismatch(`the staged image is not ${m.imageBytes} bytes`);
      await eachLimited(changed, PARALLEL, async ([index, id]) => {
        const key = keys.chunk(id);
        const blob = await this.store.get(key);
        if (!blob) throw new MissingBlobError(key);
        const plain = sealer.openChunk(blob, key, id, m.chunkSize);
        if (plain.length !== want(index)) throw new CorruptBlobError(key);
        await fh.write(plain, 0, plain.length, index * m.chunkSize);
      });
      for (const index of gone) await fh.write(Buffer.alloc(want(index)), 0, want(index), index * m.chunkSize);
      await fh.sync();
    } finally {
      await fh.close();
    }
    return { fetched: changed.length, zeroed: gone.length, chunks: m.chunks.length };
  }

  /** Writes the checkpoint's image to `dest` (created; sparse where the image is zero), every
   *  chunk checked; flushed (fsync) before it answers unless `o.sync` is false (a restore: the
   *  runtime flushes it beside the server's stop). On any failure `dest` is removed and the error
   *  thrown. */
  async materialize(m: Manifest, dest: string, o: { sync?: boolean } = {}): Promise<void> {
    const sealer = await this.seal();
    await rm(dest, { force: true });
    const fh = await open(dest, 'wx', 0o600);
    try {
      await fh.truncate(m.imageBytes);
      await eachLimited(m.chunks, PARALLEL, async ([index, id]) => {
        const key = keys.chunk(id);
        const blob = await this.store.get(key);
        if (!blob) throw new MissingBlobError(key);
        const want = Math.min(m.chunkSize, m.imageBytes - index * m.chunkSize);
        const plain = sealer.openChunk(blob, key, id, m.chunkSize);
        if (plain.length !== want) throw new CorruptBlobError(key);
        await fh.write(plain, 0, plain.length, index * m.chunkSize);
      });
      if (o.sync !== false) await fh.sync();
      await fh.close();
    } catch (e) {
      await fh.close().catch(() => {});
      await rm(dest, { force: true });
      throw e;
    }
  }
}
