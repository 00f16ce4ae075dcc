// A returning host's copies of servers the registry now places on another host (issue 38): moved
// or recovered there while this host was away or cut off, at a newer epoch. The wake fence never
// starts them here; at start (the names' reconcile, registrysync.ts), when this host reaches the
// registry again after fencing itself (`dropMoved`), and as soon as the placement cache shows one that runs
// here placed on another host (`watchPlacedAway`), each copy is removed from this host —
// its container, disk, exposed ports and records here, nothing of what is shared: its placement,
// slug, domains and checkpoints are the new owner's. Except a copy whose disk was written after
// the newest checkpoint that holds it: those writes are nowhere else, so the disk is kept aside in
// the data dir's lost+found (runtime/lostfound.ts) and the operator told (an error in the log,
// a `rootbox doctor` line) instead of being deleted.
//
// When the copy was last written: the newest ctime over the server's own files (runtime's
// filesChangedAt; the disk image's mtime moves when the disk is mounted again after a reboot).
// Which checkpoint holds this copy: the newest this host took of it (its record here with the
// disk's mtime at the copy; records of checkpoints another host took, adopted from the store, are
// passed over) — a checkpoint the new owner took after it restored holds none of
// this copy's later writes, so it is not compared. Without one here, the store's newest
// checkpoint of the server (its created_at); the store unreadable, or no checkpoint at all: the
// copy is kept aside (never delete what may be the only copy). A runtime that cannot copy disks
// (or a server without a disk) keeps nothing.

import type { Logger } from '../log/index.js';
import { keepAside, type Runtime } from '../runtime/index.js';
import type { Store } from '../store/index.js';
import type { ServerCheckpoints } from './checkpoints.js';
import type { SharedNames } from './servers.js';

export interface StaleCopyDeps {
  store: Store;
  runtime: Runtime;
  checkpoints?: ServerCheckpoints;
  dataDir: string;
  log: Logger;
  /** What this host alone holds of a server besides its runtime and records (exposed ports' listeners, the proxy's memory). */
  releaseLocal(id: string): Promise<void>;
}

/** Whether this host's disk of `id` holds writes no checkpoint holds, and the times compared. */
export async function unsaved(
  d: Pick<StaleCopyDeps, 'store' | 'runtime' | 'checkpoints'>,
  id: string,
): Promise<{ unsaved: boolean; writtenAt?: number; checkpointAt?: number }> {
  // what the server wrote (not the image's mtime, which mounting it moves); a runtime without it: the image's
  const writtenAt = d.runtime.filesChangedAt?.(id) ?? d.runtime.diskWrittenAt?.(id);
  if (writtenAt === undefined) return { unsaved: false };
  // taken here: a record carries the disk's mtime at the copy only when this host took it or
  // made a moved server's disk from it (the records of the store's other checkpoints, adopted at
  // start or kept by a move, carry none)
  const mine = d.store.checkpoints.list(id).find((c) => c.writtenAt !== undefined);
  if (mine) {
    const at = mine.writtenAt ?? mine.createdAt;
    return { unsaved: writtenAt > at, writtenAt, checkpointAt: at };
  }
  try {
    const newest = (await d.checkpoints?.engine.list(id))?.[0];
    if (!newest) return { unsaved: true, writtenAt };
    return { unsaved: writtenAt > newest.createdAt, writtenAt, checkpointAt: newest.createdAt };
  } catch {
    return { unsaved: true, writtenAt }; // the store unreadable: kept aside
  }
}

/** Removes this host's copies of `ids` (servers the registry places on another host, `placedOn`),
 *  each one with unsaved writes kept aside first. A copy that could not be kept aside is left
 *  as it is (stopped; the next start tries again). */
export async function dropStaleCopies(
  d: StaleCopyDeps,
  ids: readonly string[],
  placedOn: (id: string) => string | undefined = () => undefined,
): Promise<{ removed: string[]; keptAside: string[]; left: string[] }> {
  const removed: string[] = [];
  const kept: string[] = [];
  const left: string[] = [];
  for (const id of ids) {
    const rec = d.store.servers.get(id);
    if (!rec) continue;
    try {
      if (d.runtime.get(id)) {
        const u = await unsaved(d, id);
        if (u.unsaved) {
          if (!d.runtime.captureDisk) throw new Error('this runtime cannot copy a disk to keep it aside');
          const uidBase = d.runtime.get(id)!.uidBase;
          const image = await d.runtime.captureDisk(id, async (copy) =>
            keepAside(d.dataDir, copy.path, {
              server: id,
              slug: rec.slug,
              accountId: rec.accountId,
              diskWrittenAt: u.writtenAt!,
              checkpointAt: u.checkpointAt,
              placedOn: placedOn(id),
              uidBase,
            }),
          );
          kept.push(id);
          d.log.error('a server now placed on another host had writes here newer than its newest checkpoint: its disk is kept aside, not deleted', {
            server: id,
            slug: rec.slug,
            placedOn: placedOn(id),
            diskWrittenAt: new Date(u.writtenAt!).toISOString(),
            checkpointAt: u.checkpointAt === undefined ? undefined : new Date(u.checkpointAt).toISOString(),
            image,
          });
        }
        await d.releaseLocal(id);
        await d.runtime.delete(id);
      } else await d.releaseLocal(id);
      for (const c of d.store.checkpoints.list(id)) await d.store.checkpoints.remove(id, c.id); // the records here; the blobs are the new owner's
      d.store.servers.remove(id);
      removed.push(id);
    } catch (err) {
      left.push(id);
      d.log.error('a stale copy of a server placed on another host was not removed; the next start tries again', { server: id, err });
    }
  }
  return { removed, keptAside: kept, left };
}

/** After this host fenced itself and reached the registry again, or once the placement cache
 *  shows servers of this host placed on another host (`only`: those; `watchPlacedAway`): each
 *  one's placement read from the registry, as the wake fence reads it, and those it places on
 *  another host stopped when running and dropped as at a start. False when the registry did not
 *  answer (left to the next try, or the next start). */
export async function dropMoved(
  d: StaleCopyDeps,
  names: Pick<SharedNames, 'self' | 'placementOf'>,
  only?: readonly string[],
  /** Servers another part removes itself (a move's outcome being settled: moves/asked.ts): left to it. */
  skip: (id: string) => boolean = () => false,
): Promise<boolean> {
  if (!names.placementOf || !names.self) return true;
  const where = new Map<string, string>();
  try {
    for (const id of only ?? d.store.servers.all().map((s) => s.id)) {
      if (!d.store.servers.get(id) || skip(id)) continue;
      const p = await names.placementOf(id);
      if (p && p !== 'deleted' && p.host !== names.self) where.set(id, p.host);
    }
  } catch (err) {
    d.log.warn('placements not read; stale copies of servers placed on another host are removed later (the self-fence tries again at its next check)', {
      err: (err as Error).message,
    });
    return false;
  }
  if (!where.size) return true;
  for (const id of where.keys())
    if (d.runtime.get(id)?.state === 'running')
      await d.runtime // a frozen copy killed where it stands: never thawed to run a grace
        .stop(id, { park: false, ...(d.runtime.frozen?.(id) !== undefined ? { graceMs: 0 } : {}) })
        .catch((err) => d.log.error('could not stop a server placed on another host', { server: id, err }));
  const dropped = await dropStaleCopies(d, [...where.keys()], (id) => where.get(id));
  const still = [...where.keys()].filter((id) => d.runtime.get(id)?.state === 'running');
  if (still.length) throw new Error(`copies of servers placed on another host still run here: ${still.join(', ')} (removed: ${dropped.removed.join(', ')})`);
  d.log.warn('stale copies of servers placed on another host removed', dropped);
  return true;
}

/** Every `everyMs`, this host's running servers the placement cache shows on another host
 *  (`placedAway`) — recovered or moved there while this host ran them, a split it did not fence
 *  against, a move's source that did not hear the end — are stopped and dropped (`drop`:
 *  dropMoved, which reads each placement from the registry first), except those `busy` (a move of
 *  this host's under way: its source deletes its copy itself). A sleeping copy cannot diverge (the
 *  wake fence refuses every start of it) and is left to the next start or fence's end, as before.
 *  One round at a time; after a round the registry did not answer, the next waits `everyMs` × 10.
 *  Answers the stop. */
export function watchPlacedAway(o: {
  placedAway(): string[];
  busy(id: string): boolean;
  drop(ids: string[]): Promise<boolean>;
  every(ms: number, fn: () => void): { cancel(): void };
  everyMs: number;
  log: Logger;
}): () => void {
  let running = false;
  let skip = 0;
  const t = o.every(o.everyMs, () => {
    if (running || skip-- > 0) return;
    const ids = o.placedAway().filter((id) => !o.busy(id));
    if (!ids.length) return;
    running = true;
    o.drop(ids)
      .then((ok) => (skip = ok ? 0 : 10))
      .catch((err: unknown) => (o.log.error('stale copies of servers placed on another host: not removed', { err }), (skip = 10)))
      .finally(() => (running = false));
  });
  return () => t.cancel();
}
