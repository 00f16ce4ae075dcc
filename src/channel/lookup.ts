// Where a slug's server runs, as the forwarding edge needs it: the part of `registry.placements`
// (src/registry/placements.ts: loaded at start, followed by LISTEN/NOTIFY, caught up by version
// after any reconnect) the channel reads — sync lookups from the cache, `fresh` after a "not
// here" (a stale entry costs one retry: the owner checks the epoch), hosts with their lease, and
// which server every active custom domain of the cluster routes to.

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
