// The cluster CA in the registry (DESIGN part 6): made once by `rootbox cluster init`, read by
// every host at start to sign its own short-lived channel certificate. Membership is holding the
// registry's credentials: the row (its key included) is readable by the registry's role only
// (REVOKE ALL FROM PUBLIC), as every other shared record; a host that cannot read it cannot join
// the channel. The key is never logged.

import type { RegistryPool } from './pool.js';

export interface CaPair {
  name: string;
  certPem: string;
  keyPem: string;
}

export class RegistryCa {
  constructor(private readonly pool: RegistryPool) {}

  /** Stores `make()`'s CA unless one exists (two inits at once keep the first); answers the one kept. */
  async ensure(make: () => CaPair): Promise<{ ca: CaPair; created: boolean }> {
    const have = await this.load();
    if (have) return { ca: have, created: false };
    const ca = make();
    const r = await this.pool.query('INSERT INTO cluster_ca (id, name, cert_pem, key_pem) VALUES (1, $1, $2, $3) ON CONFLICT (id) DO NOTHING', [
      ca.name,
      ca.certPem,
      ca.keyPem,
    ]);
    if (r.rowCount === 1) return { ca, created: true };
    return { ca: (await this.load())!, created: false };
  }

  /** The cluster's CA; undefined before `rootbox cluster init` made it. */
  async load(): Promise<CaPair | undefined> {
    const r = await this.pool.query<{ name: string; cert_pem: string; key_pem: string }>('SELECT name, cert_pem, key_pem FROM cluster_ca WHERE id = 1');
    const x = r.rows[0];
    return x && { name: x.name, certPem: x.cert_pem, keyPem: x.key_pem };
  }
}
