// The collector of unreferenced chunks: what a deleted checkpoint, a superseded automatic one or a
// killed checkpoint (chunks uploaded, no manifest) left in the store.
//
// Mark and sweep, safe against a checkpoint running at the same time (on this host or another
// one sharing the store), with only what every BlobStore offers (no modification times): a
// checkpoint writes its pending marker, then waits while any sweep's lock exists (engine.ts);
// each collector (its owner and run: every host of a cluster collects the shared store) writes
// its own lock key and removes only that one, then reads the pending markers and sweeps only when there is none
// younger than the grace period (`staleMs`). Whichever writes first, the other sees it: either the
// collector sees the checkpoint pending and sweeps nothing this time, or the checkpoint sees the
// lock and starts trusting the store's chunks only after the sweep. Markers and locks older than
// the grace period were left by killed processes and are removed, and so are those of an earlier
// run of this engine's owner at once (its daemon was killed: one daemon per data dir), so the
// first collection after a restart takes what a kill cut off; those of this run are live exactly
// while this process writes them, however long (a large disk to a slow store outlasts the grace). A manifest that does not open stops
// the collection before anything is deleted: a chunk is never swept on a failed read.

import type { CheckpointEngine } from './engine.js';
import { chunkIdOf, keys } from './manifest.js';

/** A temporary file younger than this may be a live put's, whatever run wrote it. */
const TEMP_MIN_AGE_MS = 60_000;

export interface GcReport {
  /** Whether a sweep ran (false: a checkpoint was pending). */
  swept: boolean;
  /** Chunks referenced by some manifest. */
  live: number;
  /** Chunks removed, and their bytes. */
  removed: number;
  removedBytes: number;
  /** Pending markers of killed checkpoints removed. */
  stale: number;
  /** Temporary files of killed puts removed (the directory store). */
  temp?: number;
}

async function pendingMarkers(engine: CheckpointEngine): Promise<{ live: number; stale: string[] }> {
  const store = engine.store;
  let live = 0;
  const stale: string[] = [];
  for await (const { key } of store.list(keys.pendingPrefix)) {
    const blob = await store.get(key);
    if (!blob) continue;
    let body: Record<string, unknown> = {};
    try {
      body = (JSON.parse(Buffer.from(blob).toString()) as Record<string, unknown> | null) ?? {};
    } catch {
      body = {};
    }
    if (engine.dead(body, Number(body.startedAt), engine.writing.has(key.slice(keys.pendingPrefix.length)))) stale.push(key);
    else live++;
  }
  return { live, stale };
}

/** One collection pass; a process runs one at a time (they share its lock key). */
export function collect(engine: CheckpointEngine): Promise<GcReport> {
  const next = engine.gcQueue.then(
    () => collectOnce(engine),
    () => collectOnce(engine),
  );
  engine.gcQueue = next.catch(() => {});
  return next;
}

async function collectOnce(engine: CheckpointEngine): Promise<GcReport> {
  const store = engine.store;
  const report: GcReport = { swept: false, live: 0, removed: 0, removedBytes: 0, stale: 0 };
  const before = await pendingMarkers(engine);
  for (const key of before.stale) (await store.delete(key), report.stale++);
  // killed collectors' locks (another's live lock is its own to remove)
  for (const l of await engine.locks()) if (!l.live && l.key !== engine.lockKey) await store.delete(l.key);
  if (before.live > 0) return report; // a checkpoint is under way: nothing to do until it ends
  try {
    engine.sweeping++;
    await store.put(engine.lockKey, engine.stamp({ at: engine.now() }));
    if ((await pendingMarkers(engine)).live > 0) return report;
    const marked = new Set<string>();
    for (const m of await engine.list()) for (const [, id] of m.chunks) marked.add(id);
    report.live = marked.size;
    for await (const { key, size } of store.list(keys.chunkPrefix)) {
      const id = chunkIdOf(key);
      if (id === undefined || marked.has(id)) continue;
      await store.delete(key);
      report.removed++;
      report.removedBytes += size;
    }
    report.swept = true;
    // a killed put's temporary file: older than this run (one daemon per data dir) and a minute
    if (store.sweepTemp) report.temp = await store.sweepTemp(Math.max(TEMP_MIN_AGE_MS, engine.now() - engine.startedAt));
    return report;
  } finally {
    engine.sweeping--;
    await store.delete(engine.lockKey);
  }
}
