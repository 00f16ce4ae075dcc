// Records every host serves or checks (schema 6): TLS certificates (the host's wildcard and
// customers' domains), custom domains (one holder across hosts), and servers' SSH public keys by
// fingerprint (another host authenticates a login for a server it does not run), with the HTTP-01
// answers of the orders under way.
//
// A certificate's private key is stored sealed under a cluster secret (certseal.ts): the
// registry alone opens no key. One host orders a given certificate at a time, holding its lease
// row (certorders.ts, schema 16) but no registry connection while it talks to the CA; the others
// poll until it is released and take the stored result. Each row has a version from one
// sequence, so a host picks up renewed and new certificates by asking for versions above the
// highest it saw: taken under the feed's FEED_LOCK held until commit, so versions commit in order
// (a smaller one committed later would be skipped).

import { clusterSecret } from './accounts.js';
import { OrderLease, ORDER_LEASE_MS } from './certorders.js';
import { CERT_SECRET_NAME, openCertKey, sealCertKey } from './certseal.js';
import { FEED_LOCK } from './feed.js';
import type { RegistryPool } from './pool.js';
import type { ClusterKeys } from './token.js';

export { ORDERS_SQL, ORDER_LEASE_MS } from './certorders.js';
export { SHARED_SQL } from './shared-schema.js';

export interface SharedCertificate {
  id: string;
  names: string[];
  certPem: string;
  keyPem: string;
  notAfter: number;
  issuedAt: number;
  /** The registry's version of this row (grows with every write). */
  version: number;
  /** Removed (the domain was detached): a host uninstalls it. */
  removed: boolean;
}

export interface ServerKey {
  serverId: string;
  fingerprint: string;
  publicKey: string;
  host: string;
}

type CertRow = { id: string; names: string[]; cert_pem: string; key_enc: Buffer; not_after: string; issued_at: string; version: string; removed: boolean };

export class RegistryShared {
  private secret?: Buffer;
  private readonly lease: OrderLease;

  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
    private readonly keys: ClusterKeys,
    /** How long a host waits for another's order before answering that it is still running. */
    private readonly waitMs = 6 * 60_000,
    /** How long an order's lease lasts without renewal (a crashed holder's expires after it). */
    leaseMs = ORDER_LEASE_MS,
  ) {
    this.lease = new OrderLease(pool, host, leaseMs);
  }

  // ── the cluster secret certificate keys are encrypted under ──

  private async key(): Promise<Buffer> {
    this.secret ??= (await clusterSecret(this.pool, this.keys, true, CERT_SECRET_NAME))!;
    return this.secret;
  }

  private async row(r: CertRow): Promise<SharedCertificate> {
    return {
      id: r.id,
      names: r.names,
      certPem: r.cert_pem,
      keyPem: openCertKey(r.key_enc, await this.key(), r.id),
      notAfter: Number(r.not_after),
      issuedAt: Number(r.issued_at),
      version: Number(r.version),
      removed: r.removed,
    };
  }

  // ── certificates ──

  /** Stores a certificate (its key sealed); a row with the same chain is left as it is. */
  async saveCertificate(
    c: Omit<SharedCertificate, 'version' | 'removed'>,
    q: { query(sql: string, params: unknown[]): Promise<{ rowCount: number | null }> } = this.pool,
    /** Only when the registry has no row of that id (a box's join: the registry's, even removed, is the cluster's). */
    o: { ifAbsent?: boolean } = {},
  ): Promise<boolean> {
    const sealed = sealCertKey(c.keyPem, await this.key(), c.id); // the key read before a transaction holds a connection
    if (q === this.pool) return this.pool.tx((t) => this.saveCertificate(c, t, o)); // q: a transaction's client
    await q.query('SELECT pg_advisory_xact_lock($1)', [FEED_LOCK]); // versions commit in order (header)
    const r = await q.query(
      `INSERT INTO certificates (id, names, cert_pem, key_enc, not_after, issued_at, host) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (id) ${
         o.ifAbsent
           ? 'DO NOTHING'
           : `DO UPDATE SET names = $2, cert_pem = $3, key_enc = $4, not_after = $5, issued_at = $6, host = $7,
         removed = false, version = nextval('certificates_version')
       WHERE certificates.cert_pem <> EXCLUDED.cert_pem OR certificates.removed`
       }`,
      [c.id, JSON.stringify(c.names), c.certPem, sealed, c.notAfter, c.issuedAt, this.host],
    );
    return r.rowCount === 1;
  }

  /** Marks a certificate removed (hosts uninstall it at their next poll). */
  async removeCertificate(id: string): Promise<void> {
    await this.pool.tx(async (t) => {
      await t.query('SELECT pg_advisory_xact_lock($1)', [FEED_LOCK]); // versions commit in order (header)
      await t.query("UPDATE certificates SET removed = true, version = nextval('certificates_version') WHERE id = $1 AND NOT removed", [id]);
    });
  }

  // ── HTTP-01 answers: the ordering host's tokens, answered by whichever host the CA reaches ──

  async putChallenge(token: string, keyAuthorization: string): Promise<void> {
    await this.pool.query(
      `INSERT INTO acme_challenges (token, key_authorization, expires_at) VALUES ($1, $2, now() + interval '1 hour')
       ON CONFLICT (token) DO UPDATE SET key_authorization = EXCLUDED.key_authorization, expires_at = EXCLUDED.expires_at`,
      [token, keyAuthorization],
    );
  }

  async dropChallenge(token: string): Promise<void> {
    await this.pool.query('DELETE FROM acme_challenges WHERE token = $1 OR expires_at < now()', [token]);
  }

  async challenge(token: string): Promise<string | undefined> {
    const r = await this.pool.query<{ key_authorization: string }>('SELECT key_authorization FROM acme_challenges WHERE token = $1 AND expires_at > now()', [
      token,
    ]);
    return r.rows[0]?.key_authorization;
  }

  /** Every row written after `version` (removed ones too), oldest first. */
  async certificatesSince(version: number): Promise<SharedCertificate[]> {
    const r = await this.pool.query<CertRow>('SELECT * FROM certificates WHERE version > $1 ORDER BY version', [version]);
    return Promise.all(r.rows.map((x) => this.row(x)));
  }

  /**
   * The certificate `id`, ordered by this host only when no other host is ordering it and the
   * stored one is not good enough (`good`). Exactly one host runs `order` at a time: it holds the
   * certificate's lease row for the order's duration (renewed every third of the lease) and stores
   * the result before letting go; a host that finds the lease held waits for it and takes what the
   * holder stored. No registry connection is held across `order`. `ordered` tells whether this
   * host made the order.
   */
  async orderOnce(
    id: string,
    good: (c: SharedCertificate) => boolean,
    order: () => Promise<Omit<SharedCertificate, 'id' | 'version' | 'removed' | 'issuedAt'>>,
    sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ): Promise<{ cert: SharedCertificate; ordered: boolean }> {
    const deadline = Date.now() + this.waitMs;
    for (;;) {
      const holder = await this.lease.take(id);
      if (holder) {
        try {
          return await this.orderHolding(id, holder, good, order);
        } finally {
          await this.lease.release(id, holder);
        }
      }
      if (Date.now() > deadline) throw new Error(`another host's order of certificate ${id} has not ended`);
      await sleep(200);
    }
  }

  private async orderHolding(
    id: string,
    holder: string,
    good: (c: SharedCertificate) => boolean,
    order: () => Promise<Omit<SharedCertificate, 'id' | 'version' | 'removed' | 'issuedAt'>>,
  ): Promise<{ cert: SharedCertificate; ordered: boolean }> {
    const r = await this.pool.query<CertRow>('SELECT * FROM certificates WHERE id = $1 AND NOT removed', [id]);
    const stored = r.rows[0] && (await this.row(r.rows[0]));
    if (stored && good(stored)) return { cert: stored, ordered: false };
    const renewed = this.lease.renewing(id, holder);
    let issued;
    try {
      issued = await order();
    } finally {
      renewed();
    }
    await this.saveCertificate({ id, ...issued, issuedAt: Date.now() });
    const back = await this.pool.query<CertRow>('SELECT * FROM certificates WHERE id = $1', [id]);
    return { cert: await this.row(back.rows[0]), ordered: true };
  }

  // ── custom domains ──

  /** Claims `domain` for a server of this host; `takeover` also takes it from a claim in `yielding` states. False when another server holds it. */
  async claimDomain(d: { domain: string; serverId: string; accountId: string; state: string }, takeover = false): Promise<boolean> {
    const r = await this.pool.query(
      `INSERT INTO custom_domains (domain, server_id, account_id, host, state) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (domain) DO UPDATE SET server_id = $2, account_id = $3, host = $4, state = $5, claimed_at = now()
       WHERE custom_domains.server_id = $2 OR ($6 AND custom_domains.state IN ('pending_dns', 'failed'))`,
      [d.domain, d.serverId, d.accountId, this.host, d.state, takeover],
    );
    return r.rowCount === 1;
  }

  async domainState(domain: string, serverId: string, state: string): Promise<void> {
    // an unchanged state writes nothing (every write is a version every host catches up)
    await this.pool.query('UPDATE custom_domains SET state = $3 WHERE domain = $1 AND server_id = $2 AND state <> $3', [domain, serverId, state]);
  }

  async releaseDomain(domain: string, serverId: string): Promise<void> {
    await this.pool.query('DELETE FROM custom_domains WHERE domain = $1 AND server_id = $2', [domain, serverId]);
  }

  // ── servers' SSH keys ──

  async recordKey(k: Omit<ServerKey, 'host'>): Promise<void> {
    await this.pool.query(
      `INSERT INTO server_keys (server_id, fingerprint, public_key, host) VALUES ($1, $2, $3, $4)
       ON CONFLICT (server_id) DO UPDATE SET fingerprint = $2, public_key = $3, host = $4, recorded_at = now()
       WHERE (server_keys.fingerprint, server_keys.public_key, server_keys.host) IS DISTINCT FROM ($2, $3, $4)`,
      [k.serverId, k.fingerprint, k.publicKey, this.host],
    );
  }

  /** Records many keys in one statement (a host's start: servers placed before keys were shared);
   *  a key recorded unchanged writes nothing (every write is a version every host catches up). */
  async recordKeys(keys: readonly Omit<ServerKey, 'host'>[]): Promise<void> {
    if (!keys.length) return;
    await this.pool.query(
      `INSERT INTO server_keys (server_id, fingerprint, public_key, host)
       SELECT s, f, k, $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS x(s, f, k)
       ON CONFLICT (server_id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, public_key = EXCLUDED.public_key, host = EXCLUDED.host
       WHERE (server_keys.fingerprint, server_keys.public_key, server_keys.host) IS DISTINCT FROM (EXCLUDED.fingerprint, EXCLUDED.public_key, EXCLUDED.host)`,
      [keys.map((k) => k.serverId), keys.map((k) => k.fingerprint), keys.map((k) => k.publicKey), this.host],
    );
  }

  async removeKey(serverId: string): Promise<void> {
    await this.pool.query('DELETE FROM server_keys WHERE server_id = $1', [serverId]);
  }

  /** The servers whose key has this fingerprint (SHA256, base64 without padding), from any host:
   *  a read of the registry (logins use the placement cache's copy, `placements.keys`). */
  async byFingerprint(fingerprint: string): Promise<ServerKey[]> {
    const r = await this.pool.query<{ server_id: string; fingerprint: string; public_key: string; host: string }>(
      'SELECT * FROM server_keys WHERE fingerprint = $1 ORDER BY server_id',
      [fingerprint],
    );
    return r.rows.map((x) => ({ serverId: x.server_id, fingerprint: x.fingerprint, publicKey: x.public_key, host: x.host }));
  }
}
