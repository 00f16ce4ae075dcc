// What hosting keeps in line with the registry in cluster mode (none of it acts on a single box):
// each server's settings (never_sleep, exposed ports, suspension) written where a recovery on
// another host reads them (registry/settings.ts), after each change of one; at start, the
// registry's placements and slugs made to match this host's store, then the reservations of its
// earlier run released; and this host's stale copies of servers the registry places on another
// host removed (stalecopies.ts) — at that start, when it reaches the registry again after fencing
// itself, and when the placement cache shows a server running here placed elsewhere (main.ts).
// core.ts wires it once.

import type { Config } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import type { ServerRecord, Store } from '../store/index.js';
import type { ServerCheckpoints } from './checkpoints.js';
import { exposedOf, type Exposures } from './expose.js';
import type { SharedQuotas } from './quotas.js';
import type { Servers, ServerSettings, SharedNames } from './servers.js';
import { dropMoved, dropStaleCopies, type StaleCopyDeps } from './stalecopies.js';
import type { PlacementsToShow } from './unavailable.js';

/** What the registry side of hosting needs (HostingDeps' slice). */
export interface RegistrySyncDeps {
  cfg: Readonly<Config>;
  log: Logger;
  store: Store;
  runtime: Runtime;
  /** Registry mode: slugs, placements and settings shared by every host. */
  names?: SharedNames;
  /** Registry mode: the limits counted across hosts. */
  quotas?: SharedQuotas;
  /** Registry mode: where every server runs (the placement cache). */
  placements?: PlacementsToShow;
  /** Forgets a deleted server outside the runtime (idle tracking, the proxy's caches). */
  forget?(serverId: string): void;
}

/** What the registry keeps of a server's settings (registry/settings.ts): a recovery elsewhere brings them back. */
const settingsOf = (store: Store, rec: ServerRecord): Omit<ServerSettings, 'serverId'> => ({
  neverSleep: rec.neverSleep,
  exposed: exposedOf(store, rec.id),
  suspended: rec.suspended,
  flag: rec.flag,
});

/** Registry mode: told after a change of server `id`'s settings, keeps them to be written where a
 *  recovery reads them (off the answer's path, again until the registry takes them); a no-op
 *  without a registry. */
export function settingsWriter(d: Pick<RegistrySyncDeps, 'names' | 'store'>): (id: string) => Promise<void> {
  const settings = d.names?.settings && ((row: ServerSettings) => d.names!.settings!(row));
  return async (id: string) => {
    const rec = d.store.servers.get(id);
    // a server moved away or being deleted: its new owner writes them, or they go with its placement
    if (!settings || !rec) return;
    // kept and written off the answer's path, the newest first, again until the registry takes it
    settings({ serverId: id, ...settingsOf(d.store, rec) });
  };
}

/** The start's reconcile, the removal of stale copies and the servers placed away, over the
 *  hosting parts that hold what this host alone has of a server (HostingCore's join, dropMoved,
 *  placedAway). */
export function registrySync(
  d: RegistrySyncDeps,
  parts: { servers: Pick<Servers, 'delete'>; exposures: Pick<Exposures, 'releaseServer'>; checkpoints?: ServerCheckpoints },
): {
  join(skip?: (id: string) => boolean): Promise<void>;
  dropMoved(only?: readonly string[], skip?: (id: string) => boolean): Promise<boolean>;
  placedAway(): string[];
} {
  const stale: StaleCopies = {
    store: d.store,
    runtime: d.runtime,
    checkpoints: parts.checkpoints,
    dataDir: d.cfg.dataDir,
    log: d.log,
    releaseLocal: async (id) => (await parts.exposures.releaseServer(id), d.forget?.(id)),
    placedOn: (id) => d.placements?.byServer(id)?.host,
  };
  return {
    async join(skip) {
      await reconcileAtStart(d, parts.servers, stale, skip);
    },
    dropMoved: (only, skip) => (d.names ? dropMoved(stale, d.names, only, skip) : Promise.resolve(true)),
    placedAway: () => {
      const self = d.names?.self;
      if (!self || !d.placements) return [];
      return d.store.servers
        .all()
        .filter((s) => {
          const host = d.placements!.byServer(s.id)?.host;
          const state = d.runtime.get(s.id)?.state;
          return host !== undefined && host !== self && (state === 'running' || state === 'waking');
        })
        .map((s) => s.id);
    },
  };
}

/** Registry mode, at start: the registry's names made to match the store, then the reservations
 *  of this host's earlier run released — only once the reconcile succeeded, which proves this run
 *  holds the host's name (names.ts writes nothing otherwise): a run that does not hold it must not
 *  remove the reservations of the run that does. */
export async function reconcileAtStart(
  d: Pick<RegistrySyncDeps, 'names' | 'quotas' | 'store' | 'cfg' | 'log' | 'runtime'>,
  servers: Pick<Servers, 'delete'>,
  stale?: StaleCopies,
  skip?: (id: string) => boolean,
): Promise<void> {
  if (await reconcileNames(d, servers, stale, skip)) await releaseOwnQuotas(d);
}

/** How the start's reconcile removes this host's copies of servers placed on another host (stalecopies.ts). */
export type StaleCopies = StaleCopyDeps & { placedOn(id: string): string | undefined };

/** Registry mode: the registry's placements and slugs of this host made to match its store (a
 *  registry that cannot be reached now is reconciled at the next start; nothing is lost meanwhile:
 *  a stale claim only keeps a name taken). Whether it was reconciled (true without a registry). */
async function reconcileNames(
  d: Pick<RegistrySyncDeps, 'names' | 'store' | 'cfg' | 'log' | 'runtime'>,
  all: Pick<Servers, 'delete'>,
  stale?: StaleCopies,
  /** Servers another part removes itself (a move's outcome being settled): their copies left to it. */
  skip: (id: string) => boolean = () => false,
): Promise<boolean> {
  if (!d.names) return true;
  const servers = d.store.servers.all().map((s) => ({
    id: s.id,
    slug: s.slug,
    accountId: s.accountId,
    sshPublicKey: s.sshPublicKey,
    keyFingerprint: s.keyFingerprint,
    settings: settingsOf(d.store, s),
  }));
  try {
    // servers another host handed over, not committed here yet: the moves part resolves them by their placement
    const moving = new Set(
      d.store.servers
        .pendingAll()
        .filter((s) => s.pending!.op === 'move')
        .map((s) => s.id),
    );
    const r = await d.names.reconcile(servers, d.cfg.publicIp, moving);
    if (r.removed.length || r.released.length || r.placed.length) d.log.info('registry reconciled', r);
    if (r.lost?.length)
      d.log.error('servers placed here (started or handed over here) that this host does not have: marked lost in the registry, their checkpoints kept', {
        servers: r.lost,
      });
    if (r.conflicts.length) d.log.error('servers whose subdomain another host holds in the registry', { slugs: r.conflicts });
    if (r.elsewhere.length) {
      d.log.error('servers this host has that the registry places on another host: left there, not placed here, not run here', { servers: r.elsewhere });
      // fencing: one left running by the previous daemon is stopped, its disk kept; the runtime
      // never starts it (its start guard: the registry's wake fence, main.ts)
      for (const id of r.elsewhere)
        if (d.runtime.get(id)?.state === 'running')
          await d.runtime.stop(id).catch((err) => d.log.error('could not stop a server placed on another host', { server: id, err }));
      // moved or recovered on another host while this host was away: this host's stale copies go,
      // one with writes newer than its newest checkpoint kept aside in lost+found (stalecopies.ts)
      if (stale && r.moved?.length) {
        const dropped = await dropStaleCopies(
          stale,
          r.moved.filter((id) => !skip(id)),
          stale.placedOn,
        );
        d.log.warn('stale copies of servers placed on another host removed', dropped);
      }
    }
    if (r.deleted.length) {
      // deleted in the registry while this host was away: its delete is finished here, not undone
      d.log.warn('servers deleted in the registry while this host was away: deleted here too', { servers: r.deleted });
      for (const id of r.deleted) {
        const rec = d.store.servers.get(id);
        if (rec) await all.delete(rec).catch((err) => d.log.error('could not delete a server the registry deleted', { server: id, err }));
      }
    }
  } catch (err) {
    d.log.warn('registry not reconciled at start; retried at the next start', { err: (err as Error).message });
    return false;
  }
  return true;
}

/** Registry mode: what this host reserved before a kill (a create cut off, commands of the dead
 *  daemon) goes now; a registry away, or a name this run does not hold, leaves it to expire. */
async function releaseOwnQuotas(d: Pick<RegistrySyncDeps, 'quotas' | 'log'>): Promise<void> {
  try {
    const n = await d.quotas?.releaseOwn();
    if (n) d.log.info('reservations of an earlier run released', { reservations: n });
  } catch (err) {
    d.log.warn('reservations of an earlier run not released; they expire', { err: (err as Error).message });
  }
}
