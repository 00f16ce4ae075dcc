// A server's checkpoints for the API (issue 37; the routes are checkpointroutes.ts): take one,
// list them, delete one, restore one. The work is src/checkpoints' (a consistent copy of the
// disk, chunked, encrypted, stored; restore verifies every chunk before the disk is swapped); this
// file checks the server is the caller's (another account's server or checkpoint is 404, as if
// absent), gathers the server's settings and keeps the store's record of each checkpoint (the list).

import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { blobKeys, type Checkpoints, type Manifest } from '../checkpoints/index.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import type { AccountRecord, CheckpointRecord, ServerRecord, Store } from '../store/index.js';
import { tierOf, type Tier } from './accounts.js';

/** A checkpoint's record from its manifest. */
const recordOf = (m: Manifest, accountId: string): CheckpointRecord => ({
  id: m.id,
  serverId: m.serverId,
  accountId,
  createdAt: m.createdAt,
  kind: m.kind,
  ...(m.comment ? { comment: m.comment } : {}),
  sizeBytes: m.dataBytes,
  newBytes: m.newBytes,
});

/** What hosting tells billing of a server's checkpoints and, in cluster mode, asks the registry. */
export interface CheckpointHooks {
  /** Cluster mode: whether the registry places the server on some host (its checkpoints are
   *  then that host's, never this one's to remove). */
  placed?(serverId: string): Promise<boolean>;
  /** Cluster mode: the placement epoch under which this host runs the server (the epoch it last
   *  wrote, registry/names.ts), recorded in each checkpoint's manifest: a recovery follows the
   *  lineage by it, not by the hosts' clocks (moves/recover.ts). Where it is given and knows none
   *  for a server, the server's checkpoints wait (registry_unavailable). */
  epochOf?(serverId: string): number | undefined;
  /** The server's stored checkpoint bytes changed (taken, pruned, deleted, its server gone). */
  changed?(serverId: string, accountId: string): void;
}

/** Cluster mode: a manifest of a server no host has is removed only once it is this old (a box
 *  that joined the cluster checkpoints its servers only after placing them at start, but a
 *  margin costs nothing: a leftover waits an hour). */
const ORPHAN_GRACE_MS = 3_600_000;

/** Checkpoints of the server, of the runtime and store this host has (hosting's side of them). */
export class ServerCheckpoints {
  /** Manual checkpoints being taken now, per server (counted against the cap with the stored ones). */
  private readonly taking = new Map<string, number>();
  /** Per server, the last of its removals and reconciles (they run one at a time). */
  private readonly busy = new Map<string, Promise<unknown>>();

  constructor(
    private readonly store: Store,
    private readonly runtime: Runtime,
    readonly engine: Checkpoints,
    /** Manual checkpoints a server of each tier may hold (absent: no cap). */
    private readonly manualCap?: Readonly<Record<Tier, number>>,
    private readonly hooks: CheckpointHooks = {},
  ) {}

  /** 429 checkpoint_limit when the server holds its tier's maximum of manual checkpoints. */
  private assertRoom(rec: ServerRecord, account: AccountRecord): void {
    const tier = tierOf(account);
    const max = this.manualCap?.[tier];
    if (max === undefined) return;
    const held = this.store.checkpoints.list(rec.id).filter((c) => c.kind === 'manual').length + (this.taking.get(rec.id) ?? 0);
    if (held >= max)
      throw AppError.of(
        'checkpoint_limit',
        `server ${rec.id} holds ${held} manual checkpoints, the most a server of a ${tier} account may keep (${max}); delete one (DELETE /servers/${rec.id}/checkpoints/{cid}) to take another`,
      );
  }

  /** What a checkpoint keeps of the server besides its disk. */
  settingsOf(rec: ServerRecord, account: AccountRecord) {
    const rootfs = this.runtime.get(rec.id)?.rootfs;
    let runSh = false;
    try {
      runSh = !!rootfs && lstatSync(join(rootfs, 'root', 'run.sh')).isFile(); // never follows a link out of the server
    } catch {
      runSh = false;
    }
    return { tier: tierOf(account), image: this.store.runtime.get(rec.id)?.image ?? '', slug: rec.slug, runSh };
  }

  async take(rec: ServerRecord, account: AccountRecord, kind: 'manual' | 'auto', comment?: string): Promise<CheckpointRecord> {
    if (kind === 'auto') return this.takeNow(rec, account, kind, comment);
    this.assertRoom(rec, account);
    this.taking.set(rec.id, (this.taking.get(rec.id) ?? 0) + 1);
    try {
      return await this.takeNow(rec, account, kind, comment);
    } finally {
      const n = (this.taking.get(rec.id) ?? 1) - 1;
      if (n > 0) this.taking.set(rec.id, n);
      else this.taking.delete(rec.id);
    }
  }

  private async takeNow(rec: ServerRecord, account: AccountRecord, kind: 'manual' | 'auto', comment?: string): Promise<CheckpointRecord> {
    const epoch = this.hooks.epochOf?.(rec.id);
    if (this.hooks.epochOf && epoch === undefined) {
      // cluster mode before this run read the server's placement (the registry away since the
      // start): a checkpoint without its epoch would rank below every older one with an epoch in
      // a recovery (moves/recover.ts), so it waits until the registry was read
      throw AppError.of(
        'registry_unavailable',
        `server ${rec.id}'s placement has not been read from the cluster registry since this host started: its checkpoint waits until it is`,
        {
          retryAfter: 10,
        },
      );
    }
    const { manifest, writtenAt } = await this.engine.take(rec.id, this.settingsOf(rec, account), kind, comment, epoch);
    const r = { ...recordOf(manifest, rec.accountId), writtenAt };
    await this.store.checkpoints.add(r);
    this.hooks.changed?.(rec.id, rec.accountId);
    return r;
  }

  /** Whether the server wrote to its disk since its newest checkpoint (true without one). */
  changed(rec: ServerRecord): boolean {
    const last = this.store.checkpoints.list(rec.id)[0];
    const now = this.runtime.diskWrittenAt?.(rec.id);
    return !last?.writtenAt || now === undefined || now > last.writtenAt;
  }

  /** Whether the server's disk is known to have been written after its newest checkpoint (or it
   *  has a disk and no checkpoint): false where the runtime cannot tell. */
  writtenSince(rec: ServerRecord): boolean {
    const at = this.runtime.diskWrittenAt?.(rec.id);
    if (at === undefined) return false;
    const last = this.store.checkpoints.list(rec.id)[0];
    return !last?.writtenAt || at > last.writtenAt;
  }

  list(rec: ServerRecord): CheckpointRecord[] {
    return this.store.checkpoints.list(rec.id);
  }

  /** The server's checkpoint record, or 404 checkpoint_not_found. */
  owned(rec: ServerRecord, cid: string): CheckpointRecord {
    const r = this.store.checkpoints.get(rec.id, cid);
    if (!r || r.accountId !== rec.accountId) throw AppError.of('checkpoint_not_found', `server ${rec.id} has no checkpoint ${cid.slice(0, 40)}`);
    return r;
  }

  private serial<T>(serverId: string, fn: () => Promise<T>): Promise<T> {
    const p = (this.busy.get(serverId) ?? Promise.resolve()).then(fn, fn);
    const tail = p.catch(() => {});
    this.busy.set(serverId, tail);
    void tail.then(() => this.busy.get(serverId) === tail && this.busy.delete(serverId));
    return p;
  }

  async remove(rec: ServerRecord, cid: string): Promise<void> {
    this.owned(rec, cid);
    await this.serial(rec.id, async () => {
      await this.engine.remove(rec.id, cid).catch((e: unknown) => {
        if (!(e instanceof AppError && e.code === 'checkpoint_not_found')) throw e;
      });
      await this.store.checkpoints.remove(rec.id, cid);
    });
    this.hooks.changed?.(rec.id, rec.accountId);
  }

  /** The records of this host's servers made to match the store's manifests (the manifest is the
   *  checkpoint; the record its index), for what a daemon killed between the two left: a manifest
   *  written whose record was not (a checkpoint killed after its manifest) gets its record, so it
   *  is listed, billed and deleted like any other instead of holding its chunks unseen for ever; a
   *  record whose manifest is gone (a delete killed between the two) goes, so no checkpoint is
   *  listed whose chunks the collector may take. Only checkpoints made before `before` (this
   *  run's start): one this run is taking has its manifest before its record. */
  async reconcile(before: number, log: Logger): Promise<{ adopted: number; dropped: number; orphans: number }> {
    const inStore = new Map<string, Set<string>>();
    for await (const { key } of this.engine.engine.store.list(blobKeys.manifests())) {
      const [, serverId, id] = key.split('/');
      if (!serverId || !id) continue;
      let ids = inStore.get(serverId);
      if (!ids) inStore.set(serverId, (ids = new Set()));
      ids.add(id);
    }
    let adopted = 0;
    let dropped = 0;
    for (const rec of this.store.servers.all()) {
      await this.serial(rec.id, async () => {
        const ids = inStore.get(rec.id) ?? new Set<string>();
        for (const r of this.store.checkpoints.list(rec.id)) {
          if (ids.has(r.id) || r.createdAt >= before) continue;
          if (await this.engine.engine.store.has(blobKeys.manifest(rec.id, r.id))) continue;
          await this.store.checkpoints.remove(rec.id, r.id);
          dropped++;
          log.warn('a checkpoint whose manifest is gone from the store is no longer listed', { server: rec.id, checkpoint: r.id });
        }
        for (const id of ids) {
          if (this.store.checkpoints.get(rec.id, id)) continue;
          const m = await this.engine.engine.read(rec.id, id).catch((err: unknown) => {
            log.warn('a checkpoint manifest in the store cannot be opened; passed over', { server: rec.id, checkpoint: id, err });
            return null; // one damaged manifest must not keep the others' records (and the collection after) from being fixed
          });
          if (!m || m.createdAt >= before) continue;
          await this.store.checkpoints.add(recordOf(m, rec.accountId));
          adopted++;
          log.info('a checkpoint whose record a killed run did not write is listed', { server: rec.id, checkpoint: id });
        }
      });
    }
    const orphans = await this.removeOrphans(inStore, log);
    return { adopted, dropped, orphans };
  }

  /** Manifests of servers that no longer exist, removed (their chunks are then the collector's):
   *  what a delete killed before it removed them left (the next start drops the server's record
   *  without them). A server is gone when this host's store has no record of it (pending ones
   *  included: a create records its server before anything is made, so before any checkpoint)
   *  and, in cluster mode, the registry places it on no host either (a placement is written
   *  before the server is committed, so before its first checkpoint; another host's servers are
   *  never touched), and only for manifests older than ORPHAN_GRACE_MS there. On a single box
   *  the store must also still hold checkpoint records of the server (a delete removes each record
   *  after its manifest; the start that finishes a cut-off delete drops the server's record, not
   *  these): proof it was this box's server and was deleted — a server made after the state
   *  backup a data dir was rebuilt from, or another box's in a shared bucket, has none and keeps
   *  its manifests for the operator. The store is read first, the records and placements after:
   *  a server made in between has no manifest listed. A manifest this host cannot open (another
   *  secret's) is never removed. */
  private async removeOrphans(inStore: ReadonlyMap<string, ReadonlySet<string>>, log: Logger): Promise<number> {
    const known = new Set(this.store.servers.all({ withPending: true }).map((r) => r.id));
    let removed = 0;
    for (const [serverId, ids] of inStore) {
      if (known.has(serverId)) continue;
      if (this.hooks.placed) {
        const placed = await this.hooks.placed(serverId).catch(() => true); // the registry away: kept
        if (placed || this.store.servers.getAny(serverId)) continue;
      } else if (this.store.checkpoints.list(serverId).length === 0) continue; // never this store's server
      await this.serial(serverId, async () => {
        for (const id of ids) {
          const m = await this.engine.engine.read(serverId, id).catch(() => null);
          if (!m) continue;
          if (this.hooks.placed && this.engine.engine.now() - m.createdAt < ORPHAN_GRACE_MS) continue;
          await this.engine.engine.remove(serverId, id);
          removed++;
          log.info('a checkpoint of a server that no longer exists is removed', { server: serverId, checkpoint: id });
        }
        for (const r of this.store.checkpoints.list(serverId)) await this.store.checkpoints.remove(serverId, r.id);
      });
    }
    return removed;
  }

  /** The checkpoint a fork starts from: the one named (the server's), or one taken now. */
  async forkSource(rec: ServerRecord, account: AccountRecord, cid?: string): Promise<Manifest> {
    if (cid !== undefined) {
      this.owned(rec, cid);
      return this.engine.get(rec.id, cid);
    }
    const taken = await this.take(rec, account, 'manual', 'taken for a fork');
    return this.engine.get(rec.id, taken.id);
  }

  /** A deleted server's checkpoints go with it (a store that cannot be reached keeps their
   *  blobs: logged, the delete goes on; their records go either way). */
  forgetServer(serverId: string, log: Logger): Promise<void> {
    return this.serial(serverId, async () => {
      const had = this.store.checkpoints.list(serverId);
      for (const r of had) {
        await this.engine.engine
          .remove(serverId, r.id)
          .catch((err) => log.warn('a deleted server’s checkpoint stays in the store', { server: serverId, checkpoint: r.id, err }));
        await this.store.checkpoints.remove(serverId, r.id);
      }
      if (had.length > 0) this.hooks.changed?.(serverId, had[0].accountId);
    });
  }

  async restore(rec: ServerRecord, cid: string): Promise<CheckpointRecord> {
    const r = this.owned(rec, cid);
    await this.engine.restore(rec.id, cid);
    return r;
  }
}
