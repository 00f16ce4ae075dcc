// Request counters by (route, status) and named counters (unpaid 402s, paid hits), kept across
// restarts. The totals live in memory (loaded at open) and are what read() answers; every flush
// interval the changed totals are written as absolute values, so a hot path never waits on a
// commit and a read never counts a batch twice or misses one that is being committed.

import type { LmdbEnv } from './db.js';

export class StatsStore {
  private readonly db;
  private readonly totals = new Map<string, number>();
  private readonly dirty = new Set<string>();
  /** The last flush's commit (settled either way): a later flush, and so close, waits for it. */
  private committing: Promise<void> = Promise.resolve();

  constructor(env: LmdbEnv) {
    this.db = env.db<number>('stats');
    for (const { key, value } of this.db.getRange()) if (typeof key === 'string') this.totals.set(key, value);
  }

  increment(counter: string, by = 1): void {
    this.totals.set(counter, (this.totals.get(counter) ?? 0) + by);
    this.dirty.add(counter);
  }

  /** Writes the changed totals in one transaction; resolves once this and every earlier flush committed. */
  async flush(): Promise<void> {
    const earlier = this.committing; // never rejects: a failed flush does not stop the ones after it
    if (this.dirty.size === 0) return earlier;
    const batch = [...this.dirty].map((k) => [k, this.totals.get(k) ?? 0] as const);
    this.dirty.clear();
    const write = earlier
      .then(() =>
        this.db.transaction(() => {
          for (const [k, n] of batch) this.db.put(k, n);
        }),
      )
      .then(
        () => undefined,
        (e: unknown) => {
          for (const [k] of batch) this.dirty.add(k); // written again by the next flush, never lost
          throw e;
        },
      );
    this.committing = write.catch(() => undefined);
    return write;
  }

  /** Every counter whose name starts with prefix. */
  read(prefix = ''): Record<string, number> {
    const out: Record<string, number> = {};
    for (const k of [...this.totals.keys()].sort()) if (k.startsWith(prefix)) out[k] = this.totals.get(k)!;
    return out;
  }
}
