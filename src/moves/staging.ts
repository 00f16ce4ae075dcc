// The target's staged images of a running server's move (issue 38, the prestage): while the
// server still serves on its source, the source's running checkpoint (C1) is materialized here
// into a private file, every chunk verified and the file flushed; after the stop the source's
// final checkpoint (C2) names C1 as its base and the adopt only patches the chunks that differ
// (engine patch) before the file is renamed to the server's disk. A stage is nothing but that
// file: no record, reservation, mount, container or placement — nothing fencing looks at.
//   - one stage per server: a new prepare of it replaces the old (whose file goes, even while
//     it is still being written);
//   - used only when complete and of the base the adopt names; taken out of the list at once
//     (no sweep or second adopt can meet it), its file removed on any failure;
//   - <dataDir>/moves/staged, on the data dir's filesystem (a rename to servers/<id>/disk.img),
//     wiped at the daemon's start (a killed prepare or patch leaves nothing used), a stage older
//     than STAGE_TTL_MS removed by the sweep (a source that never asked its adopt);
//   - the staged bytes count against this host's disk room (prepare and adopt check it).

import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Manifest } from '../checkpoints/index.js';

/** How long a stage whose adopt never came is kept. */
export const STAGE_TTL_MS = 10 * 60_000;

/** What the staging needs of the checkpoints. */
export interface StageEngine {
  materialize(m: Manifest, path: string): Promise<void>;
  patch(base: Manifest, m: Manifest, file: string): Promise<{ fetched: number; zeroed: number; chunks: number }>;
}

interface Stage {
  checkpoint: string;
  manifest: Manifest;
  path: string;
  done: boolean;
  at: number;
}

export class Staging {
  private readonly stages = new Map<string, Stage>();

  constructor(
    readonly dir: string,
    private readonly engine: () => StageEngine | undefined,
    private readonly now: () => number = Date.now,
  ) {}

  /** Removes every staged file (the daemon's start: none is in use). */
  wipe(): void {
    rmSync(this.dir, { recursive: true, force: true });
    this.stages.clear();
  }

  /** Materializes checkpoint `m` of its server into a new stage (replacing the server's earlier one); resolves once flushed. */
  async prepare(m: Manifest): Promise<void> {
    const engine = this.engine();
    if (!engine) throw new Error('no checkpoints on this host');
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const st: Stage = {
      checkpoint: m.id,
      manifest: m,
      path: join(this.dir, `${m.serverId}.${m.id}.${randomBytes(6).toString('hex')}.img`),
      done: false,
      at: this.now(),
    };
    this.drop(m.serverId);
    this.stages.set(m.serverId, st);
    try {
      await engine.materialize(m, st.path);
    } catch (e) {
      if (this.stages.get(m.serverId) === st) this.stages.delete(m.serverId);
      throw e;
    }
    if (this.stages.get(m.serverId) !== st) {
      await rm(st.path, { force: true }); // replaced or swept meanwhile
      throw new Error('the stage was replaced while it was written');
    }
    st.done = true;
  }

  /** Turns the server's complete stage of checkpoint `base` into `m`'s image at `dest`; throws
   *  (the stage gone either way) when there is none such or the patch fails. */
  async take(serverId: string, base: string, m: Manifest, dest: string): Promise<{ fetched: number; zeroed: number; chunks: number }> {
    const st = this.stages.get(serverId);
    const engine = this.engine();
    if (!st || !st.done || st.checkpoint !== base || !engine) throw new Error(`no complete stage of checkpoint ${base}`);
    this.stages.delete(serverId);
    try {
      const r = await engine.patch(st.manifest, m, st.path);
      await rename(st.path, dest);
      return r;
    } catch (e) {
      await rm(st.path, { force: true });
      throw e;
    }
  }

  /** Removes the server's stage, if any (its file goes; a prepare still writing it sees that). */
  drop(serverId: string): void {
    const st = this.stages.get(serverId);
    if (!st) return;
    this.stages.delete(serverId);
    rmSync(st.path, { force: true });
  }

  /** Removes the stages older than `ttlMs`. */
  sweep(ttlMs = STAGE_TTL_MS): number {
    let n = 0;
    for (const [id, st] of [...this.stages]) if (this.now() - st.at > ttlMs) (this.drop(id), n++);
    return n;
  }

  /** Bytes the stages hold (their checkpoints' data), but for `except`'s. */
  bytes(except?: string): number {
    let n = 0;
    for (const [id, st] of this.stages) if (id !== except) n += st.manifest.dataBytes;
    return n;
  }

  /** Whether server `id` has a stage (tests). */
  has(id: string): { checkpoint: string; path: string; done: boolean } | undefined {
    const st = this.stages.get(id);
    return st && { checkpoint: st.checkpoint, path: st.path, done: st.done };
  }
}
