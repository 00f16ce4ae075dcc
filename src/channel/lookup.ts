// Where a slug's server runs, as the forwarding edge needs it: the part of `registry.placements`
// (src/registry/placements.ts: loaded at start, followed by LISTEN/NOTIFY, caught up by version
// after any reconnect) the channel reads — sync lookups from the cache, `fresh` after a "not
// here" (a stale entry costs one retry: the owner checks the epoch), hosts with their lease, and
// which server every active custom domain of the cluster routes to. The owner's side checks a
// sender's epoch against `ownersView`: the cache, or the epoch this host itself wrote when the
// cache trails it.

import type { Placement } from '../registry/index.js';

/** A placement (the registry's record) as the channel routes by it: the server, the host that
 *  runs it, and the epoch the owner checks. */
export type PlacementToRoute = Pick<Placement, 'serverId' | 'slug' | 'host' | 'epoch'>;

export interface HostView {
  name: string;
  advertise: string;
  /** Its lease runs, or the channel to it answers (down: neither). */
  up: boolean;
}

export interface Placements {
  bySlug(slug: string): PlacementToRoute | undefined;
  byServer(id: string): PlacementToRoute | undefined;
  fresh(slug: string): Promise<PlacementToRoute | undefined>;
  host(name: string): HostView | undefined;
  /** The placement of the server an active custom domain routes to (the cluster's domain map; absent: none is routed). */
  domain?(name: string): PlacementToRoute | undefined;
  /** `domain()` after one catch-up read. */
  freshDomain?(name: string): Promise<PlacementToRoute | undefined>;
}

/**
 * Where the owner's side (owner-server, owner-api, owner-ssh) believes a server runs, to check the
 * epoch a sender saw: the placement cache's answer, unless this host itself wrote a newer epoch
 * for the server (`epochOf`: registry names) than the cache holds — a server it placed, took over
 * or started again (a restart, a wake: each start bumps the epoch) while its own cache's catch-up
 * trails that write (NOTIFY handled later than a peer's, a catch-up that failed and waits for the
 * next tick). Epochs only grow, and every write that places a server on this host is this host's,
 * so a newer epoch of its own is the registry's state as of that write: the server is here at it.
 * Without it a peer whose cache heard first sends the new epoch, this host answers "not here",
 * the peer's registry read confirms what it sent, and the client gets 503 "no longer runs it".
 */
export function ownersView(
  cache: Pick<Placements, 'byServer'>,
  self: string,
  epochOf?: (serverId: string) => number | undefined,
): Pick<Placements, 'byServer'> {
  return {
    byServer: (id) => {
      const cached = cache.byServer(id);
      const wrote = epochOf?.(id);
      if (wrote === undefined || (cached && cached.epoch >= wrote)) return cached;
      return { serverId: id, slug: cached?.slug ?? '', host: self, epoch: wrote };
    },
  };
}
