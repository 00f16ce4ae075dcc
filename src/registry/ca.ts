// The cluster CA in the registry (DESIGN part 6): made once by `rootbox cluster init`, read by
// every host at start to sign its own short-lived channel certificate. Its key is stored sealed
// under the cluster token (token.ts, schema 14): the registry's credentials alone, a dump or a
// standby's files do not give it; a host opens it with the token it was given. The row is
// readable by the registry's role only (REVOKE ALL FROM PUBLIC). The key is never logged.

import type { RegistryPool } from './pool.js';
import { CA_PURPOSE, type ClusterKeys } from './token.js';

export interface CaPair {
  name: string;
  certPem: string;
  keyPem: string;
}

export class RegistryCa {
  constructor(
    private readonly pool: Pick<RegistryPool, 'query'>,
    private readonly keys: ClusterKeys,
  ) {}

  /** Stores `make()`'s CA unless one exists (two inits at once keep the first); answers the one kept. */
  async ensure(make: () => CaPair): Promise<{ ca: CaPair; created: boolean }> {
    const have = await this.load();
    if (have) return { ca: have, created: false };
    const ca = make();
    const sealed = this.keys.seal(ca.keyPem, CA_PURPOSE).toString('base64');
    const r = await this.pool.query(
      'INSERT INTO cluster_ca (id, name, cert_pem, key_pem, key_sealed) VALUES (1, $1, $2, $3, true) ON CONFLICT (id) DO NOTHING',
      [ca.name, ca.certPem, sealed],
    );
    if (r.rowCount === 1) return { ca, created: true };
    return { ca: (await this.load())!, created: false };
  }

  /** The cluster's CA; undefined before `rootbox cluster init` made it. */
  async load(): Promise<CaPair | undefined> {
    const r = await this.pool.query<{ name: string; cert_pem: string; key_pem: string; key_sealed: boolean }>(
      'SELECT name, cert_pem, key_pem, key_sealed FROM cluster_ca WHERE id = 1',
    );
    const x = r.rows[0];
    // a key still in clear: written before schema 14, sealed by init or the next host's start
    const keyPem = x && (x.key_sealed ? this.keys.open(Buffer.from(x.key_pem, 'base64'), CA_PURPOSE).toString('utf8') : x.key_pem);
    return x && { name: x.name, certPem: x.cert_pem, keyPem: keyPem! };
  }
}
