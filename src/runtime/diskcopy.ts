// Copies of a server's disk image for checkpoints (issue 37), and the swap of a restored one.
//
// capture: a crash-consistent copy while the server's processes keep running. The server's own
// ext4 (its loop mount servers/<id>/disk, never the host's filesystem) is synced, then frozen
// (`fsfreeze -f`: writers block, nothing is dirty), the image copied — a reflink (`cp
// --reflink=always`, FICLONE) where the data dir's filesystem has them (XFS, btrfs: milliseconds
// whatever the size), else a sparse-aware copy (`cp --sparse=auto`: SEEK_DATA/SEEK_HOLE, holes
// stay holes) — and thawed in a finally. A marker file (servers/<id>/disk.frozen) exists while
// the disk may be frozen: a daemon killed meanwhile thaws it at the next start (thawLeftovers).
// The copy's extents (FIEMAP, `filefrag -e`) say where data may be, so the reader skips holes.
// A sleeping server's disk is frozen the same way (no wake: its files routes may still write).
//
// swap: a complete image staged beside the old one (servers/<id>/disk.img.new.<random>: a name of
// its own per restore, so two never write one file), renamed over it while the disk is unmounted;
// a crash leaves the old image or the new one, never a mix.

import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, lchownSync, lstatSync, mkdirSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DiskPaths } from './disk.js';
import { mountedPaths } from './disk.js';
import { InternalError } from '../errors.js';
import { nativeBinary } from './native.js';
import { run, tryRun } from './proc.js';
import type { DiskCapture, DiskSource } from './types.js';

const reflinks = new Map<string, boolean>();
const CAPTURE = 'disk.ckp';
/** A new capture's path: unique to one capture (a checkpoint's copy may still be read while another is taken). */
export const capturePath = (p: DiskPaths) => join(p.dir, `${CAPTURE}.${randomBytes(6).toString('hex')}`);
const STAGED = 'disk.img.new';
/** A new staged image's path: unique to one restore. */
export const stagedPath = (p: DiskPaths) => join(p.dir, `${STAGED}.${randomBytes(6).toString('hex')}`);
const frozenMarker = (p: DiskPaths) => join(p.dir, 'disk.frozen');

/** Copies the image, by reflink when the data dir supports it (learnt once per data dir). */
async function copyImage(src: string, dest: string, dataDir: string): Promise<'reflink' | 'copy'> {
  if (reflinks.get(dataDir) !== false) {
    if (await tryRun('cp', ['--reflink=always', src, dest], { timeoutMs: 60_000 })) {
      reflinks.set(dataDir, true);
      return 'reflink';
    }
    rmSync(dest, { force: true });
    reflinks.set(dataDir, false);
  }
  await run('cp', ['--reflink=never', '--sparse=auto', src, dest], { timeoutMs: 30 * 60_000 });
  return 'copy';
}

/** The extents of a file as byte ranges, from FIEMAP (filefrag); undefined when unreadable. */
export async function dataRanges(path: string): Promise<[number, number][] | undefined> {
  const r = await tryRun('filefrag', ['-e', path], { timeoutMs: 60_000 });
  const block = r && /blocks of (\d+) bytes/.exec(r.stdout);
  if (!r || !block) return undefined;
  const bs = Number(block[1]);
  const out: [number, number][] = [];
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*\d+:\s*(\d+)\.\.\s*(\d+):/.exec(line);
    if (m) out.push([Number(m[1]) * bs, (Number(m[2]) + 1) * bs]);
  }
  return out;
}

/** Takes a consistent copy of the server's image at a new capturePath(p): with rbx-freeze where it is
 *  built (freeze, copy and thaw in one process: no process start inside the pause), else with
 *  fsfreeze and cp. */
export async function captureImage(p: DiskPaths, dataDir: string, uidBase: number): Promise<DiskCapture> {
  const dest = capturePath(p);
  const bin = nativeBinary('rbx-freeze');
  const mounted = mountedPaths().has(p.disk);
  let capture: Omit<DiskCapture, 'uidBase'>;
  if (mounted) writeFileSync(frozenMarker(p), '');
  try {
    if (mounted && bin.built) capture = await freezeCopy(bin.path, p, dest);
    else capture = await toolCopy(p, dest, dataDir, mounted);
  } catch (e) {
    rmSync(dest, { force: true });
    throw e;
  } finally {
    if (mounted) await thaw(p); // a no-op when the copy thawed it: it is the marker's removal
  }
  return { ...capture, uidBase };
}

/** An mtime in ms as Node's stat answers it (statSync(...).mtimeMs), from its seconds and nanoseconds. */
const msOf = (sec: number, nsec: number) => sec * 1000 + nsec / 1e6;

/** rbx-freeze's copy: its pause as it measured it, the copy's data ranges, and the image's mtime
 *  as the thaw left it (read by rbx-freeze at once: a write the server was held from, flushed
 *  after the thaw, moves the mtime past it instead of counting as in the copy). */
async function freezeCopy(bin: string, p: DiskPaths, dest: string): Promise<Omit<DiskCapture, 'uidBase'>> {
  const r = await run(bin, [p.disk, p.img, dest], { timeoutMs: 30 * 60_000 });
  const lines = r.stdout.trim().split('\n');
  const head = /^ok (\d+) (reflink|copy) (\d+) (\d+)$/.exec(lines[0] ?? '');
  if (!head) throw new InternalError('rbx-freeze answered what it should not', { stdout: r.stdout.slice(0, 200) });
  const whole = lines[lines.length - 1] === 'end';
  const ranges = lines.slice(1, whole ? -1 : undefined).map((l) => l.split(' ').map(Number) as [number, number]);
  return {
    path: dest,
    ranges: whole ? ranges : undefined,
    pausedMs: Number(head[1]) / 1000,
    method: head[2] as DiskCapture['method'],
    writtenAt: msOf(Number(head[3]), Number(head[4])),
  };
}

/** The same with the host's tools: fsfreeze, cp, fsfreeze -u (a process start on each side of the
 *  copy). The image's mtime is read before the thaw (frozen, or not mounted: before the copy):
 *  what reaches the image after the thaw could come before a read after it, so the thaw's own
 *  write counts as a change here (the next sleep takes a checkpoint again: slower, never a loss). */
async function toolCopy(p: DiskPaths, dest: string, dataDir: string, freeze: boolean): Promise<Omit<DiskCapture, 'uidBase'>> {
  if (freeze) await tryRun('sync', ['-f', p.disk], { timeoutMs: 120_000 }); // flushed before the pause, not during it
  const t0 = performance.now();
  let method: DiskCapture['method'];
  let writtenAt = statSync(p.img).mtimeMs;
  if (freeze) await run('fsfreeze', ['-f', p.disk], { timeoutMs: 60_000 });
  try {
    method = await copyImage(p.img, dest, dataDir);
    if (freeze) writtenAt = statSync(p.img).mtimeMs;
  } finally {
    if (freeze) await thaw(p);
  }
  return { path: dest, ranges: await dataRanges(dest), pausedMs: performance.now() - t0, method, writtenAt };
}

/** Flushes a mounted filesystem's dirty pages to its device; throws when it could not. */
export type SyncDisk = (mountpoint: string) => Promise<void>;

/** The host's `sync -f` (syncfs). */
export const syncDisk: SyncDisk = async (mountpoint) => void (await run('sync', ['-f', mountpoint], { timeoutMs: 120_000 }));

/** What the server wrote (dirty in its ext4's page cache, on the image only at writeback, up to
 *  30 s later) flushed to its image, so the image's mtime says it changed: a stopped server's
 *  changes are then seen at once (the checkpoint at its sleep, a move's check of its newest one).
 *  Resolves true when flushed (or not mounted: nothing dirty); false with the error when the sync
 *  failed — writes may still be in the page cache, the image's mtime does not show them yet. */
export async function flushWrites(p: DiskPaths, sync: SyncDisk = syncDisk): Promise<{ ok: true } | { ok: false; err: unknown }> {
  if (!mountedPaths().has(p.disk)) return { ok: true };
  try {
    await sync(p.disk);
    return { ok: true };
  } catch (err) {
    return { ok: false, err };
  }
}

async function thaw(p: DiskPaths): Promise<void> {
  // EINVAL: not frozen (a freeze that failed, or thawed already) — done either way
  const r = await tryRun('fsfreeze', ['-u', p.disk], { timeoutMs: 60_000, okCodes: [0, 1] });
  if (r) rmSync(frozenMarker(p), { force: true });
}

/** Thaws a disk a killed daemon left frozen, and removes a capture or staged image it left. */
export async function thawLeftovers(p: DiskPaths): Promise<void> {
  if (existsSync(frozenMarker(p))) await thaw(p);
  let names: string[] = [];
  try {
    names = readdirSync(p.dir);
  } catch {
    return; // no server directory: nothing left
  }
  for (const n of names) if ([STAGED, CAPTURE].some((x) => n === x || n.startsWith(`${x}.`))) rmSync(join(p.dir, n), { force: true });
}

/** A fork's disk: the image filled from the checkpoint, grown (offline, at its mount) to the
 *  server's ceiling when the checkpoint's is smaller. */
export async function adoptImage(p: DiskPaths, from: DiskSource, diskBytes: number): Promise<void> {
  mkdirSync(p.dir, { recursive: true, mode: 0o700 }); // mountRootfs opens it to the server's root
  await from.fill(p.img);
  if (statSync(p.img).size < diskBytes) {
    truncateSync(p.img, diskBytes);
    writeFileSync(join(p.dir, 'disk.grow'), `${diskBytes}\n`); // disk.ts: resized offline by mountRootfs
  }
}

const RANGE = 65536;

/** Moves the owners of every file under `dir` (not following links) from one server's uid range
 *  to another's: a checkpoint's files on another server of another range. */
export function shiftOwners(dir: string, from: number, to: number): void {
  if (from === to) return;
  const move = (id: number) => (id >= from && id < from + RANGE ? id - from + to : id);
  const stack = [dir];
  while (stack.length) {
    const path = stack.pop() as string;
    const st = lstatSync(path);
    const uid = move(st.uid);
    const gid = move(st.gid);
    if (uid !== st.uid || gid !== st.gid) {
      lchownSync(path, uid, gid);
      // chown clears a file's setuid/setgid bits: its mode is put back as it was
      if (!st.isSymbolicLink() && st.mode & 0o6000) chmodSync(path, st.mode & 0o7777);
    }
    if (st.isDirectory()) for (const name of readdirSync(path)) stack.push(join(path, name));
  }
}
