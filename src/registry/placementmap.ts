// The placements the cache holds (placements.ts), by server and by slug, filled from the change
// feed's `placement` kind (feed.ts): a change is taken only when it is newer than what is held for
// the server, and a slug points to the newest placement that carries it (a slug deleted on one
// host and re-created on another converges to the new server whatever the order of the two).

import type { Change } from './feed.js';
import type { Placement } from './names.js';

/** A placement as the cache holds it: the record (names.ts) and the version it was written at. */
export interface CachedPlacement extends Placement {
  version: number;
}

export class PlacementMap {
  private readonly servers = new Map<string, CachedPlacement>();
  private readonly slugs = new Map<string, CachedPlacement>();

  bySlug(slug: string): CachedPlacement | undefined {
    return this.slugs.get(slug);
  }

  byServer(id: string): CachedPlacement | undefined {
    return this.servers.get(id);
  }

  /** The servers of an account, wherever they are placed. */
  ofAccount(accountId: string): CachedPlacement[] {
    return [...this.servers.values()].filter((p) => p.accountId === accountId);
  }

  /** Servers placed on each host, by host name. */
  countsByHost(): Map<string, number> {
    const m = new Map<string, number>();
    for (const p of this.servers.values()) m.set(p.host, (m.get(p.host) ?? 0) + 1);
    return m;
  }

  /** Forgets every placement (a full load follows). */
  clear(): void {
    this.servers.clear();
    this.slugs.clear();
  }

  /** Applies a change of the feed if it is a placement's (the record, or its tombstone); false otherwise. */
  take(c: Change): boolean {
    if (c.kind !== 'placement') return false;
    const had = this.servers.get(c.key);
    if (had && had.version > c.version) return true;
    if (had) {
      this.servers.delete(c.key);
      if (this.slugs.get(had.slug) === had) this.slugs.delete(had.slug);
    }
    if (c.row) {
      const x = c.row;
      const p: CachedPlacement = {
        serverId: c.key,
        slug: x.slug,
        host: x.host,
        epoch: x.epoch,
        accountId: x.account_id,
        publicIp: x.public_ip,
        version: c.version,
      };
      this.servers.set(p.serverId, p);
      const other = this.slugs.get(p.slug);
      if (!other || other.version < c.version) this.slugs.set(p.slug, p);
    }
    return true;
  }
}
