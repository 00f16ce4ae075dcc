// Request counters by (route, status) and named counters (unpaid 402s, paid hits), kept across
// restarts. Increments are batched in memory and written every flush interval, so a hot path
// never waits on a commit.

import type { LmdbEnv } from './db.js';

export class StatsStore {
  private readonly db;
  private pending = new Map<string, number>();
  /** Increments being committed: still counted by read() until the commit is visible. */
  private committing: Map<string, number>[] = [];

  constructor(env: LmdbEnv) {
    this.db = env.db<number>('stats');
  }

  increment(counter: string, by = 1): void {
    this.pending.set(counter, (this.pending.get(counter) ?? 0) + by);
  }

  /** Writes pending increments in one transaction. */
  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    this.committing.push(batch);
    try {
      await this.db.transaction(() => {
        for (const [k, n] of batch) this.db.put(k, (this.db.get(k) ?? 0) + n);
      });
    } catch (e) {
      for (const [k, n] of batch) this.increment(k, n); // kept for the next flush, never lost
      throw e;
    } finally {
      this.committing = this.committing.filter((b) => b !== batch);
    }
  }

  /** Every counter whose name starts with prefix, including unflushed increments. */
  read(prefix = ''): Record<string, number> {
    const out: Record<string, number> = {};
    for (const { key, value } of this.db.getRange({ start: prefix })) {
      if (typeof key !== 'string' || !key.startsWith(prefix)) break;
      out[key] = value;
    }
    for (const batch of [...this.committing, this.pending]) for (const [k, n] of batch) if (k.startsWith(prefix)) out[k] = (out[k] ?? 0) + n;
    return out;
  }
}
