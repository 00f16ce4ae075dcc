// A server's disk as checkpoints see it (issue 37): the consistent copy a checkpoint is taken from
// (captureImage, diskcopy.ts, serialised with the server's starts and stops so a stop never meets
// a frozen disk), the flush of a stopped server's writes to its image and when the disk was last
// written (the image's mtime: whether an automatic checkpoint is due, whether a move may reuse the
// newest one; after a flush that failed, no earlier than that failure), and the swap of a restore (a staged image filled first, then in one section
// of the server's queue the server stopped while that image is flushed, the image renamed over its
// disk while unmounted and mounted again; the server started again when it was running). The runtime (runtime.ts) owns the lifecycle around it and answers
// these through its Runtime methods.

import { renameSync, rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { InternalError } from '../errors.js';
import type { RuntimeRecord } from '../store/index.js';
import type { RuntimeDeps } from './deps.js';
import { diskPaths, mountRootfs } from './disk.js';
import { captureImage, flushWrites, shiftOwners, stagedPath } from './diskcopy.js';
import { tryRun } from './proc.js';
import type { DiskCapture, ServerState } from './types.js';

/** What the disk swap needs of the runtime. */
export interface DiskSwapHost {
  readonly deps: Pick<RuntimeDeps, 'dataDir' | 'helper' | 'log' | 'syncDisk'>;
  serverDir(id: string): string;
  serial<T>(id: string, fn: () => Promise<T>): Promise<T>;
  /** The server's record (server_not_found when it has none). */
  record(id: string): RuntimeRecord;
  /** The rootfs of the image the server was created from. */
  lower(rec: RuntimeRecord): string;
  state(id: string): ServerState | undefined;
  /** Stops the server's container (outside its queue: the caller holds it). */
  halt(rec: RuntimeRecord): Promise<void>;
  start(id: string): Promise<void>;
  /** Marks the server to be booted by the daemon's next start (a kill between the swap's stop and its start). */
  wantRunning(id: string): void;
  /** The view after a swap: sleeping, its disk as large as the image put in. */
  swapped(rec: RuntimeRecord, diskBytes: number): void;
}

export class DiskSwap {
  /** Servers whose last flush failed, with when: their writes may still be in the page cache. */
  private readonly unflushed = new Map<string, number>();

  constructor(private readonly rt: DiskSwapHost) {}

  /** A consistent copy of the server's disk; `use` runs outside the server's queue, the copy removed after. */
  async capture<T>(id: string, use: (copy: DiskCapture) => Promise<T>): Promise<T> {
    const copy = await this.rt.serial(id, async () => {
      const c = await captureImage(diskPaths(this.rt.serverDir(id)), this.rt.deps.dataDir, this.rt.record(id).uidBase);
      this.unflushed.delete(id); // frozen for it: everything written is on the image, and in the copy
      return c;
    });
    try {
      return await use(copy);
    } finally {
      rmSync(copy.path, { force: true });
    }
  }

  /** The server's writes flushed to its image (diskcopy's flushWrites: a stop's, settledAt's);
   *  false when the sync failed — logged here, once per failure, and the disk then counts as
   *  written at that failure (writtenAt: changed since any checkpoint before it, so a sleep takes
   *  a new one and a move never reuses the older one) until a later flush or a checkpoint's copy
   *  succeeds. */
  async flush(id: string): Promise<boolean> {
    const r = await flushWrites(diskPaths(this.rt.serverDir(id)), this.rt.deps.syncDisk);
    if (r.ok) {
      this.unflushed.delete(id); // what was dirty is on the image now: its mtime says so
      return true;
    }
    // read once the failed sync returned (a process later): after the stamp of any checkpoint before it
    this.unflushed.set(id, Date.now());
    this.rt.deps.log.warn('a server’s disk was not flushed: what it wrote may not be on its image yet, so it counts as changed since its checkpoint', {
      server: id,
      err: r.err,
    });
    return false;
  }

  /** A server deleted: nothing kept of it. */
  forget(id: string): void {
    this.unflushed.delete(id);
  }

  /** When the server's disk image was last written (its mtime; after a flush that failed, no
   *  earlier than that failure); undefined for a server the runtime does not know. */
  writtenAt(id: string): number | undefined {
    if (this.rt.state(id) === undefined) return undefined;
    let at: number;
    try {
      at = statSync(diskPaths(this.rt.serverDir(id)).img).mtimeMs;
    } catch {
      return undefined;
    }
    const failed = this.unflushed.get(id);
    return failed === undefined ? at : Math.max(at, failed);
  }

  /** The disk flushed (as at a stop), then writtenAt; undefined when the flush failed (the image's
   *  mtime does not hold what is still to reach it). */
  async settledAt(id: string): Promise<number | undefined> {
    if (this.rt.state(id) === undefined) return undefined;
    if (!(await this.flush(id))) return undefined;
    return this.writtenAt(id);
  }

  /** Restore: fills a staged image (a name of its own), then — in one section of the server's
   *  queue, so a wake asked meanwhile waits and boots the restored disk — stops the server while
   *  that image is flushed to disk (its fsync beside the stop, not before it: the restore waits
   *  only for the longer of the two), renames it over the disk while unmounted and mounts it; the
   *  server is started again when it was running. A fill, a flush or an unmount that fails (a
   *  busy disk) leaves the old disk, removes the staged image and starts a running server again. */
  async replace(id: string, fill: (path: string) => Promise<void>, from: { uidBase?: number } = {}): Promise<void> {
    const rec = this.rt.record(id);
    const p = diskPaths(this.rt.serverDir(id));
    const staged = stagedPath(p);
    let restart = false;
    let failed = false;
    try {
      await fill(staged);
      await this.rt.serial(id, async () => {
        const state = this.rt.state(id);
        const wasRunning = state === 'running' || state === 'waking';
        const [flushed, halted] = await Promise.allSettled([flush(staged), this.rt.halt(rec)]);
        if (halted.status === 'rejected') throw halted.reason;
        restart = wasRunning;
        this.rt.swapped(rec, statSync(p.img).size); // stopped: shown asleep on its disk until the swap
        if (flushed.status === 'rejected') throw flushed.reason;
        if (wasRunning) this.rt.wantRunning(id); // killed before the start below: the next start boots it, on whichever whole disk
        if (!(await tryRun('umount', [p.rootfs]))) throw new InternalError(`restore: the root of ${id} is busy`);
        if (!(await tryRun('umount', [p.disk]))) {
          await mountRootfs(p, this.rt.deps.helper, this.rt.lower(rec), rec.uidBase);
          throw new InternalError(`restore: the disk of ${id} is busy`);
        }
        try {
          renameSync(staged, p.img);
        } finally {
          await mountRootfs(p, this.rt.deps.helper, this.rt.lower(rec), rec.uidBase);
        }
        if (from.uidBase !== undefined) shiftOwners(p.upper, from.uidBase, rec.uidBase);
        this.rt.swapped(rec, statSync(p.img).size);
      });
    } catch (e) {
      failed = true;
      throw e;
    } finally {
      rmSync(staged, { force: true }); // gone already once renamed
      if (restart) {
        const started = this.rt.start(id);
        if (failed)
          await started.catch(() => {}); // the swap's failure is the answer
        else await started;
      }
    }
  }
}

/** The file's bytes on disk (fsync): a rename over the old image must not come before them. */
async function flush(path: string): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
