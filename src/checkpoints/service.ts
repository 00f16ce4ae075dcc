// Checkpoints of servers: the engine (engine.ts) joined to the runtime's disk copies. take()
// has the runtime copy the disk consistently (frozen for milliseconds where reflinks exist) and
// stores the copy; restore() materializes a checkpoint beside the old disk, every chunk verified,
// and only then has the runtime swap it in (the server restarts when it was running). Failures
// become the catalogue's errors: the store away → 503 store_unavailable (Retry-After), a missing
// or corrupt chunk → 502 checkpoint_corrupt, no room for the image → 507 restore_no_room; in
// each case the server keeps its disk. Which account owns a server is the caller's (hosting).

import { AppError } from '../errors.js';
import type { DiskCapture, Runtime } from '../runtime/index.js';
import { StoreUnavailableError } from './blobs.js';
import { MissingBlobError, type CheckpointEngine } from './engine.js';
import { collect, type GcReport } from './gc.js';
import { isCheckpointId, newCheckpointId, type CheckpointKind, type Manifest, type ServerSettings } from './manifest.js';
import { CorruptBlobError } from './seal.js';

/** Seconds a client waits before retrying when the store is away. */
const RETRY_AFTER_S = 30;

export interface Taken {
  manifest: Manifest;
  /** How long the server's writes were held, and how its disk was copied. */
  pausedMs: number;
  method: DiskCapture['method'];
  /** The image's mtime when it was copied (the runtime's diskWrittenAt later says whether it changed). */
  writtenAt: number;
}

/** The errors of the store and its blobs as the catalogue's; anything else as it is. */
export function publicError(e: unknown): unknown {
  if (e instanceof AppError) return e;
  if (e instanceof StoreUnavailableError)
    return AppError.of('store_unavailable', 'the checkpoint store cannot be reached right now; try again later', { retryAfter: RETRY_AFTER_S, cause: e });
  if (e instanceof CorruptBlobError || e instanceof MissingBlobError)
    return AppError.of('checkpoint_corrupt', 'a piece of this checkpoint is missing or damaged in the store; nothing was restored', { cause: e });
  if ((e as NodeJS.ErrnoException)?.code === 'ENOSPC')
    return AppError.of('restore_no_room', 'the host has no room for the restored disk; nothing was restored', { cause: e });
  return e;
}

async function mapped<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw publicError(e);
  }
}

export class Checkpoints {
  constructor(
    readonly engine: CheckpointEngine,
    private readonly runtime: Pick<Runtime, 'captureDisk' | 'replaceDisk'>,
  ) {}

  /** Whether this host's runtime can copy disks at all. */
  get available(): boolean {
    return this.runtime.captureDisk !== undefined && this.runtime.replaceDisk !== undefined;
  }

  private need<K extends 'captureDisk' | 'replaceDisk'>(k: K): NonNullable<Runtime[K]> {
    const f = this.runtime[k];
    if (!f) throw AppError.of('not_configured', 'checkpoints are not available on this host');
    return f.bind(this.runtime) as NonNullable<Runtime[K]>;
  }

  /** A checkpoint of the server now. */
  take(serverId: string, settings: ServerSettings, kind: CheckpointKind, comment?: string, epoch?: number): Promise<Taken> {
    const capture = this.need('captureDisk');
    return mapped(() =>
      capture(serverId, async (copy) => {
        const now = this.engine.now();
        const cp = { id: newCheckpointId(now), serverId, createdAt: now, epoch, kind, settings, uidBase: copy.uidBase, ...(comment ? { comment } : {}) };
        const manifest = await this.engine.write(cp, copy.path, copy.ranges);
        return { manifest, pausedMs: copy.pausedMs, method: copy.method, writtenAt: copy.writtenAt };
      }),
    );
  }

  /** The server's checkpoints, newest first. */
  list(serverId: string): Promise<Manifest[]> {
    return mapped(() => this.engine.list(serverId));
  }

  /** One checkpoint of the server, or 404 checkpoint_not_found. */
  get(serverId: string, id: string): Promise<Manifest> {
    return mapped(async () => {
      const m = isCheckpointId(id) ? await this.engine.read(serverId, id) : null;
      if (!m) throw AppError.of('checkpoint_not_found', 'this server has no such checkpoint');
      return m;
    });
  }

  /** Deletes a checkpoint's manifest without opening it (a damaged one is deleted too; its chunks
   *  go to the collector), or 404 checkpoint_not_found. */
  remove(serverId: string, id: string): Promise<void> {
    return mapped(async () => {
      if (!isCheckpointId(id) || !(await this.engine.exists(serverId, id))) throw AppError.of('checkpoint_not_found', 'this server has no such checkpoint');
      await this.engine.remove(serverId, id);
    });
  }

  /** Servers a restore runs on now: one at a time per server (a client retrying after a
   *  timeout gets 409 restore_in_progress, never a second swap over the first). */
  private readonly restoring = new Set<string>();

  /** The server's disk becomes the checkpoint's (it restarts when it was running). */
  async restore(serverId: string, id: string): Promise<Manifest> {
    const replace = this.need('replaceDisk');
    if (this.restoring.has(serverId)) throw AppError.of('restore_in_progress', 'a restore of this server is under way; try again when it has answered');
    this.restoring.add(serverId);
    try {
      const m = await this.get(serverId, id);
      await mapped(() => replace(serverId, (path) => this.engine.materialize(m, path, { sync: false }), { uidBase: m.uidBase }));
      return m;
    } finally {
      this.restoring.delete(serverId);
    }
  }

  /** Writes a checkpoint's image to `path` (a fork's new disk), every chunk verified. */
  materialize(m: Manifest, path: string): Promise<void> {
    return mapped(() => this.engine.materialize(m, path));
  }

  /** Makes `file`, checkpoint `base`'s image, checkpoint `m`'s (engine.ts patch: only the chunks that differ). */
  patch(base: Manifest, m: Manifest, file: string): Promise<{ fetched: number; zeroed: number; chunks: number }> {
    return mapped(() => this.engine.patch(base, m, file));
  }

  /** One pass of the collector of unreferenced chunks. */
  collect(): Promise<GcReport> {
    return mapped(() => collect(this.engine));
  }
}
