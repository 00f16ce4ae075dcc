// This host's writes of its servers' settings rows (settings.ts), off the request path (review 2,
// findings 4–6): hosting says what a server's settings are now (want) and goes on — an /expose
// answers without waiting for the registry, a create is not failed by it. The newest wanted row of
// each server is kept in memory until a write of it succeeded; one write at a time, always of the
// newest rows, so an older state never commits after a newer one (no two writes of a server race
// over the pool). What a failed write left is written again at each heartbeat that reached the
// registry (Registry calls retry), not only at the next start's reconcile.

import type { Logger } from '../log/index.js';
import type { RegistrySettings, ServerSettingsRow } from './settings.js';

export class SettingsWriter {
  /** The newest row of each server not yet written. */
  private readonly wanted = new Map<string, ServerSettingsRow>();
  private writing?: Promise<void>;
  private failing = false;

  constructor(
    private readonly rows: Pick<RegistrySettings, 'put'>,
    private readonly log: Logger,
  ) {}

  /** Servers whose newest settings the registry has not taken yet. */
  get pending(): number {
    return this.wanted.size;
  }

  /** These are the servers' settings now: written soon (never throws, never waits). */
  want(rows: readonly ServerSettingsRow[]): void {
    for (const r of rows) this.wanted.set(r.serverId, { ...r, exposed: [...r.exposed] });
    if (rows.length) void this.flush();
  }

  /** The registry answered (a heartbeat): what is still unwritten is written now. */
  retry(): void {
    if (this.wanted.size) void this.flush();
  }

  /** Writes what is wanted, one write at a time; settles when none is under way (never rejects). */
  flush(): Promise<void> {
    this.writing ??= this.drain().then((done) => {
      this.writing = undefined;
      // a want that came after the last write's check and before this: written too
      if (done && this.wanted.size) void this.flush();
    });
    return this.writing;
  }

  /** True when everything wanted was written; false when a write failed (kept for retry). */
  private async drain(): Promise<boolean> {
    while (this.wanted.size) {
      const rows = [...this.wanted.values()];
      this.wanted.clear();
      try {
        await this.rows.put(rows);
      } catch (err) {
        // kept, unless a newer row of the server came meanwhile (that one is the newest)
        for (const r of rows) if (!this.wanted.has(r.serverId)) this.wanted.set(r.serverId, r);
        if (!this.failing) this.log.warn('the registry did not take servers’ settings (written again at the next heartbeat)', { servers: rows.length, err });
        this.failing = true;
        return false;
      }
      if (this.failing) this.log.info('servers’ settings written to the registry again', { servers: rows.length });
      this.failing = false;
    }
    return true;
  }
}
