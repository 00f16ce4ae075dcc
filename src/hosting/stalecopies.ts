// A returning host's copies of servers the registry now places on another host (issue 38): moved
// or recovered there while this host was away or cut off, at a newer epoch. The wake fence never
// starts them here; at start (the names' reconcile, core.ts), and when this host reaches the
// registry again after fencing itself (`dropMoved`), each copy is removed from this host —
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
  // taken here: a record carries the disk's mtime at the copy only when this host took it (the
  // records of the store's other checkpoints, adopted at start or kept by a move, carry none)
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

/** After this host fenced itself and reached the registry again: its servers the registry placed
 *  on another host meanwhile (each one's placement read, as the wake fence reads it) are stopped
 *  when running and dropped as at a start (a registry that does not answer: left to the next start). */
export async function dropMoved(d: StaleCopyDeps, names: Pick<SharedNames, 'self' | 'placementOf'>): Promise<void> {
  if (!names.placementOf || !names.self) return;
  const where = new Map<string, string>();
  try {
    for (const s of d.store.servers.all()) {
      const p = await names.placementOf(s.id);
      if (p && p !== 'deleted' && p.host !== names.self) where.set(s.id, p.host);
    }
  } catch (err) {
    d.log.warn('placements not read after the fence; tried again at its next check', { err: (err as Error).message });
    throw err; // not done: the self-fence calls it again (and keeps what it froze frozen)
  }
  if (!where.size) return;
  for (const id of where.keys())
    if (d.runtime.get(id)?.state === 'running')
      await d.runtime // a frozen copy killed where it stands: never thawed to run a grace
        .stop(id, { park: false, ...(d.runtime.frozen?.(id) !== undefined ? { graceMs: 0 } : {}) })
        .catch((err) => d.log.error('could not stop a server placed on another host', { server: id, err }));
  const dropped = await dropStaleCopies(d, [...where.keys()], (id) => where.get(id));
  const still = [...where.keys()].filter((id) => d.runtime.get(id)?.state === 'running');
  if (still.length) throw new Error(`copies of servers placed on another host still run here: ${still.join(', ')} (removed: ${dropped.removed.join(', ')})`);
  d.log.warn('stale copies of servers placed on another host removed', dropped);
}
