// Where a slug's server runs, as the forwarding edge needs it: the part of `registry.placements`
// (src/registry/placements.ts: loaded at start, followed by LISTEN/NOTIFY, caught up by version
// after any reconnect) the channel reads — sync lookups from the cache, `fresh` after a "not
// here" (a stale entry costs one retry: the owner checks the epoch), hosts with their lease, and
// which server every active custom domain of the cluster routes to.

export interface PlacementView {
  serverId: string;
  slug: string;
  host: string;
  epoch: number;
}

export interface HostView {
  name: string;
  advertise: string;
  /** Its lease runs, or the channel to it answers (down: neither). */
  up: boolean;
}

export interface Placements {
  bySlug(slug: string): PlacementView | undefined;
  byServer(id: string): PlacementView | undefined;
  fresh(slug: string): Promise<PlacementView | undefined>;
  host(name: string): HostView | undefined;
  /** The placement of the server an active custom domain routes to (the cluster's domain map; absent: none is routed). */
  domain?(name: string): PlacementView | undefined;
  /** `domain()` after one catch-up read. */
  freshDomain?(name: string): Promise<PlacementView | undefined>;
}
