// The certificate order lease (schema 16): one host orders a given certificate at a time. It
// holds the certificate's row in `certificate_orders` (holder and expiry), taken and released in
// short statements and renewed while the order runs, so an order holds no registry connection
// while it talks to the CA (eight orders at once used to hold the pool's eight connections, and
// the heartbeat, auth and the fence waited on them); a holder that crashed is replaced once its
// lease expires. The order itself (what is stored, who waits) is shared.ts's `orderOnce`.

import { randomBytes } from 'node:crypto';
import type { RegistryPool } from './pool.js';

/** Schema 16: one lease row per certificate being ordered (who orders it, until when). */
export const ORDERS_SQL = `
  CREATE TABLE certificate_orders (
    id      text PRIMARY KEY,
    holder  text NOT NULL,
    until   timestamptz NOT NULL
  );`;
/** How long an order's lease lasts without renewal (a crashed holder's is taken over after it). */
export const ORDER_LEASE_MS = 60_000;

export class OrderLease {
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
    private readonly leaseMs: number,
  ) {}

  /** Takes the order lease of `id` when it is free or expired: the holder token, or undefined. */
  async take(id: string): Promise<string | undefined> {
    const holder = `${this.host} ${randomBytes(8).toString('hex')}`;
    const r = await this.pool.query(
      `INSERT INTO certificate_orders (id, holder, until) VALUES ($1, $2, now() + make_interval(secs => $3))
       ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until WHERE certificate_orders.until < now()`,
      [id, holder, this.leaseMs / 1000],
    );
    return r.rowCount === 1 ? holder : undefined;
  }

  /** Renews `holder`'s lease every third of it until the returned stop is called (while the CA
   *  works); a renewal the registry misses is tried again at the next beat. */
  renewing(id: string, holder: string): () => void {
    const renew = setInterval(() => {
      void this.pool
        .query('UPDATE certificate_orders SET until = now() + make_interval(secs => $3) WHERE id = $1 AND holder = $2', [id, holder, this.leaseMs / 1000])
        .catch(() => {});
    }, this.leaseMs / 3);
    renew.unref();
    return () => clearInterval(renew);
  }

  /** Lets go of `holder`'s lease (one the registry fails to delete expires). */
  async release(id: string, holder: string): Promise<void> {
    await this.pool.query('DELETE FROM certificate_orders WHERE id = $1 AND holder = $2', [id, holder]).catch(() => {});
  }
}
