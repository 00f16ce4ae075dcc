// Request counters by (route, status) and named counters (unpaid 402s, paid hits), kept across
// restarts. Increments are batched in memory and written every flush interval, so a hot path
// never waits on a commit.

import type { LmdbEnv } from './db.js';

export class StatsStore {
  private readonly db;
  private pending = new Map<string, number>();

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
    await this.db.transaction(() => {
      for (const [k, n] of batch) this.db.put(k, (this.db.get(k) ?? 0) + n);
    });
  }

  /** Every counter whose name starts with prefix, including unflushed increments. */
  read(prefix = ''): Record<string, number> {
    const out: Record<string, number> = {};
    for (const { key, value } of this.db.getRange({ start: prefix })) {
      if (typeof key !== 'string' || !key.startsWith(prefix)) break;
      out[key] = value;
    }
    for (const [k, n] of this.pending) if (k.startsWith(prefix)) out[k] = (out[k] ?? 0) + n;
    return out;
  }
}
