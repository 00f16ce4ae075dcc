// The cluster's two CAs in the registry (DESIGN part 6). The channel CA (`cluster_ca`): made once
// by `rootbox cluster init`, read by every host at start to sign its own short-lived channel
// certificate; it authenticates hosts to each other only. The edge CA (issue 36 item 5): the one
// trust anchor clients of the embedded default TLS are given, offered by the first host that needs
// it (its own local CA, so the clients that trusted it keep working) and taken by every other, whose
// wildcard certificate for {domain}, *.{domain} then chains to it; a separate CA, since the
// channel's must never be the thing browsers trust. The edge CA (certificate and key together) is
// a cluster secret (`cluster_secrets` row `edge-ca`, schema 4) sealed under the cluster token.
// Both keys are stored sealed under the cluster token (token.ts, schema 14): the registry's
// credentials alone, a dump or a standby's files do not give them; a host opens them with the
// token it was given. The rows are readable by the registry's role only (REVOKE ALL FROM PUBLIC).
// The keys are never logged.

import type { RegistryPool } from './pool.js';
import { CA_PURPOSE, secretPurpose, type ClusterKeys } from './token.js';

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

/** The `cluster_secrets` row the edge CA is sealed in. */
export const EDGE_CA_SECRET = 'edge-ca';

/** The edge CA every host's default HTTPS certificate chains to (see the header). */
export class RegistryEdgeCa {
  constructor(
    private readonly pool: Pick<RegistryPool, 'query'>,
    private readonly keys: ClusterKeys,
  ) {}

  /** The cluster's edge CA: the stored one, else `offer()`'s stored now (two hosts at once: the
   *  first insert is kept, and both answer it). */
  async ensure(offer: () => CaPair): Promise<CaPair> {
    const have = await this.load();
    if (have) return have;
    const sealed = this.keys.seal(JSON.stringify(offer()), secretPurpose(EDGE_CA_SECRET));
    await this.pool.query('INSERT INTO cluster_secrets (name, value, sealed) VALUES ($1, $2, true) ON CONFLICT (name) DO NOTHING', [EDGE_CA_SECRET, sealed]);
    return (await this.load())!;
  }

  /** The cluster's edge CA; undefined before a host offered one. */
  async load(): Promise<CaPair | undefined> {
    const r = await this.pool.query<{ value: Buffer }>('SELECT value FROM cluster_secrets WHERE name = $1 AND sealed', [EDGE_CA_SECRET]);
    const x = r.rows[0];
    if (!x) return undefined;
    const o = JSON.parse(this.keys.open(x.value, secretPurpose(EDGE_CA_SECRET)).toString('utf8')) as CaPair;
    return { name: o.name, certPem: o.certPem, keyPem: o.keyPem };
  }
}
