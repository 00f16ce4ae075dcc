// What keeps the change feed's tombstones from piling up (schema 16, issue 35 item 10), for the
// placement cache: after its catch-ups a host records in its hosts row the version it caught up
// to, and now and then prunes the tombstones every live host caught up past, and those older
// than the retention (feed.ts `PRUNE_TOMBSTONES`: one statement, any host may run it any time).

import type { Logger } from '../log/index.js';
import { PRUNE_TOMBSTONES } from './feed.js';
import type { RegistryPool } from './pool.js';

export interface TombstonesOptions {
  /** This host's name (unset: nothing recorded). */
  host?: string;
  /** How long a tombstone some live host has not caught up past is kept (default 7 days). */
  retentionMs?: number;
  /** How often `pruneNow` prunes (default 10 minutes; 0: never). */
  everyMs?: number;
  /** Monotonic milliseconds. */
  now: () => number;
}

const DAY = 24 * 3600_000;

export class Tombstones {
  /** The version last recorded in this host's row. */
  private recorded = 0;
  private last: number;
  private pruning = false;

  constructor(
    private readonly pool: RegistryPool,
    private readonly o: TombstonesOptions,
    private readonly log?: Logger,
  ) {
    this.last = o.now();
  }

  /** Records in this host's row that its caches caught up to `seen` (what the prune may count on). */
  async record(seen: number): Promise<void> {
    if (!this.o.host || seen <= this.recorded) return;
    await this.pool.query('UPDATE hosts SET caught_up = $2 WHERE name = $1 AND caught_up < $2', [this.o.host, seen]);
    this.recorded = seen;
  }

  /** Prunes the tombstones every live host caught up past, and those older than the retention; answers how many. */
  async prune(): Promise<number> {
    const retention = this.o.retentionMs ?? 7 * DAY;
    const r = await this.pool.query<{ n: string }>(PRUNE_TOMBSTONES, [retention / 1000]);
    const n = Number(r.rows[0]?.n ?? 0);
    if (n) this.log?.info('placements: tombstones pruned', { pruned: n });
    return n;
  }

  /** The timer's prune, every `everyMs`, one at a time; a registry away is tried again next time. */
  async pruneNow(): Promise<void> {
    const every = this.o.everyMs ?? 10 * 60_000;
    if (!every || this.pruning || this.o.now() - this.last < every) return;
    this.pruning = true;
    this.last = this.o.now();
    try {
      await this.prune();
    } catch {
      // the registry is away: the next tick's turn tries again
    } finally {
      this.pruning = false;
    }
  }
}
