// Payment locks in the registry: an x402 payment (asset, payer, nonce) is locked with one
// INSERT … ON CONFLICT DO NOTHING before any paid work, so it is used once across every host;
// the lock is taken back only when the payment was refused before any work (the payer may
// present it again), never after. A committed lock survives a failover to a synchronous standby.

import type { RegistryPool } from './pool.js';

export class RegistryPayments {
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
  ) {}

  /** Locks `key` for this host; false when it was locked before (here or on any host). */
  async lock(key: string): Promise<boolean> {
    const r = await this.pool.query("INSERT INTO payment_locks (key, host, state) VALUES ($1, $2, 'locked') ON CONFLICT (key) DO NOTHING", [key, this.host]);
    return r.rowCount === 1;
  }

  /** Gives back a lock of this host that no work used (the payment was refused before it). */
  async unlock(key: string): Promise<void> {
    await this.pool.query("DELETE FROM payment_locks WHERE key = $1 AND host = $2 AND state = 'locked'", [key, this.host]);
  }

  /** Marks the lock as used for good (the paid work started). */
  async used(key: string): Promise<void> {
    await this.pool.query("UPDATE payment_locks SET state = 'used' WHERE key = $1", [key]);
  }
}
