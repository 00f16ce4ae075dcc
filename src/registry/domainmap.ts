// Every host's view of the cluster's custom domains (issue 29 item 2): which server an active
// domain routes to, whichever host runs it, so any host's edge can take a request for it and
// forward it to the owner. Filled by the placement cache's one catch-up from the change feed
// (feed.ts, kind `domain`: a claim, a state change, a detach's tombstone), in the same snapshot
// as the placements, loaded whole at start and followed by LISTEN/NOTIFY, with the cache's timer
// as the safety net. The map is complete, so a Host it does not hold costs no registry read.

import type { Change } from './feed.js';

export interface DomainRoute {
  serverId: string;
  state: string;
  version: number;
}

export class DomainMap {
  private readonly rows = new Map<string, DomainRoute>();
  private readonly watchers: (() => void)[] = [];
  private changed = false;

  /** A domain's row (any state), undefined when no server holds it. */
  get(domain: string): DomainRoute | undefined {
    return this.rows.get(domain);
  }

  /** The server an active domain routes to. */
  activeServer(domain: string): string | undefined {
    const r = this.rows.get(domain);
    return r?.state === 'active' ? r.serverId : undefined;
  }

  get size(): number {
    return this.rows.size;
  }

  /** Applies a change of the feed if it is a domain's (its state, or its tombstone); false otherwise. */
  take(c: Change): boolean {
    if (c.kind !== 'domain') return false;
    this.apply(c.key, c.row?.server_id, c.row?.state ?? '', c.version);
    return true;
  }

  /** A domain's state, or its tombstone (`serverId` undefined). */
  private apply(domain: string, serverId: string | undefined, state: string, version: number): void {
    const had = this.rows.get(domain);
    if (had && had.version > version) return;
    if (serverId === undefined) this.rows.delete(domain);
    else this.rows.set(domain, { serverId, state, version });
    this.changed = true;
  }

  /** Forgets every domain (a full load follows). */
  clear(): void {
    if (this.rows.size) this.changed = true;
    this.rows.clear();
  }

  /** Called after each catch-up that changed a domain (certificates to install or drop). */
  watch(fn: () => void): void {
    this.watchers.push(fn);
  }

  /** After a catch-up: tells the watchers once when something changed. */
  settle(): void {
    if (!this.changed) return;
    this.changed = false;
    for (const fn of this.watchers) fn();
  }
}
