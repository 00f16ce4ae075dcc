// Records every host serves or checks (schema 6): TLS certificates (the host's wildcard and
// customers' domains), custom domains (one holder across hosts), and servers' SSH public keys by
// fingerprint (another host authenticates a login for a server it does not run).
//
// A certificate's private key is stored encrypted (AES-256-GCM) under a 32-byte cluster secret
// kept in `cluster_secrets` (schema 4) under its own name (made once by the first host that needs
// it, INSERT … ON CONFLICT DO NOTHING, then read back: every host uses the same one), itself
// sealed under the cluster token (token.ts, schema 14): the registry alone opens no key. One host
// orders a given certificate at
// a time: it holds the certificate's lease row in `certificate_orders` (schema 16: holder and
// expiry, taken and released in short statements, renewed while the order runs), so an order
// holds no registry connection while it talks to the CA (eight orders at once used to hold the
// pool's eight connections, and the heartbeat, auth and the fence waited on them); a holder that
// crashed is replaced once its lease expires. The others poll until it is released and take the
// stored result. Each row has a version from one
// sequence, so a host picks up renewed and new certificates by asking for versions above the
// highest it saw.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { clusterSecret } from './accounts.js';
import type { RegistryNames } from './names.js';
import type { RegistryPool } from './pool.js';
import type { ClusterKeys } from './token.js';

export const SHARED_SQL = `
  CREATE SEQUENCE certificates_version;
  CREATE TABLE certificates (
    id          text PRIMARY KEY,
    names       jsonb NOT NULL,
    cert_pem    text NOT NULL,
    key_enc     bytea NOT NULL,
    not_after   bigint NOT NULL,
    issued_at   bigint NOT NULL,
    host        text NOT NULL,
    version     bigint NOT NULL DEFAULT nextval('certificates_version'),
    removed     boolean NOT NULL DEFAULT false
  );
  CREATE INDEX certificates_version_idx ON certificates (version);
  CREATE TABLE acme_challenges (
    token              text PRIMARY KEY,
    key_authorization  text NOT NULL,
    expires_at         timestamptz NOT NULL
  );
  CREATE TABLE custom_domains (
    domain      text PRIMARY KEY,
    server_id   text NOT NULL,
    account_id  text NOT NULL,
    host        text NOT NULL,
    state       text NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
  );
  CREATE INDEX custom_domains_server ON custom_domains (server_id);
  CREATE TABLE server_keys (
    server_id    text PRIMARY KEY,
    fingerprint  text NOT NULL,
    public_key   text NOT NULL,
    host         text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
  );
  CREATE INDEX server_keys_fingerprint ON server_keys (fingerprint);`;

/** Schema 16: one lease row per certificate being ordered (who orders it, until when). */
export const ORDERS_SQL = `
  CREATE TABLE certificate_orders (
    id      text PRIMARY KEY,
    holder  text NOT NULL,
    until   timestamptz NOT NULL
  );`;
/** How long an order's lease lasts without renewal (a crashed holder's is taken over after it). */
export const ORDER_LEASE_MS = 60_000;
const SECRET_NAME = 'certificate-keys';

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

  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
    private readonly keys: ClusterKeys,
    /** How long a host waits for another's order before answering that it is still running. */
    private readonly waitMs = 6 * 60_000,
    /** How long an order's lease lasts without renewal (a crashed holder's expires after it). */
    private readonly leaseMs = ORDER_LEASE_MS,
  ) {}

  // ── the cluster secret certificate keys are encrypted under ──

  private async key(): Promise<Buffer> {
    this.secret ??= (await clusterSecret(this.pool, this.keys, true, SECRET_NAME))!;
    return this.secret;
  }

  private seal(plain: string, k: Buffer, id: string): Buffer {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', k, iv);
    c.setAAD(Buffer.from(`rootbox certificate key\n${id}`));
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return Buffer.concat([iv, c.getAuthTag(), body]);
  }

  private open(sealed: Buffer, k: Buffer, id: string): string {
    const d = createDecipheriv('aes-256-gcm', k, sealed.subarray(0, 12));
    d.setAAD(Buffer.from(`rootbox certificate key\n${id}`));
    d.setAuthTag(sealed.subarray(12, 28));
    return Buffer.concat([d.update(sealed.subarray(28)), d.final()]).toString('utf8');
  }

  private async row(r: CertRow): Promise<SharedCertificate> {
    return {
      id: r.id,
      names: r.names,
      certPem: r.cert_pem,
      keyPem: this.open(r.key_enc, await this.key(), r.id),
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
    const sealed = this.seal(c.keyPem, await this.key(), c.id);
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
    await this.pool.query("UPDATE certificates SET removed = true, version = nextval('certificates_version') WHERE id = $1 AND NOT removed", [id]);
  }

  /** Every row written after `version` (removed ones too), oldest first. */
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
      const holder = await this.takeOrder(id);
      if (holder) {
        try {
          return await this.orderHolding(id, holder, good, order);
        } finally {
          await this.pool.query('DELETE FROM certificate_orders WHERE id = $1 AND holder = $2', [id, holder]).catch(() => {});
        }
      }
      if (Date.now() > deadline) throw new Error(`another host's order of certificate ${id} has not ended`);
      await sleep(200);
    }
  }

  /** Takes the order lease of `id` when it is free or expired: the holder token, or undefined. */
  private async takeOrder(id: string): Promise<string | undefined> {
    const holder = `${this.host} ${randomBytes(8).toString('hex')}`;
    const r = await this.pool.query(
      `INSERT INTO certificate_orders (id, holder, until) VALUES ($1, $2, now() + make_interval(secs => $3))
       ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until WHERE certificate_orders.until < now()`,
      [id, holder, this.leaseMs / 1000],
    );
    return r.rowCount === 1 ? holder : undefined;
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
    // renewed while the CA works; a renewal the registry misses is tried again at the next beat
    const renew = setInterval(() => {
      void this.pool
        .query('UPDATE certificate_orders SET until = now() + make_interval(secs => $3) WHERE id = $1 AND holder = $2', [id, holder, this.leaseMs / 1000])
        .catch(() => {});
    }, this.leaseMs / 3);
    renew.unref();
    let issued;
    try {
      issued = await order();
    } finally {
      clearInterval(renew);
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

/**
 * The registry's names and placements with each placed server's SSH public key recorded beside
 * its placement (what hosting sees as SharedNames in registry mode): place() writes the
 * placement, then the key; remove() forgets both.
 */
export function keyedNames(names: RegistryNames, shared: RegistryShared) {
  return {
    claim: (slug: string, serverId: string) => names.claim(slug, serverId),
    release: (slug: string, serverId: string) => names.release(slug, serverId),
    /** Also records the keys of the servers placed here (those placed before keys were shared). */
    async reconcile(servers: readonly { id: string; slug: string; accountId: string; sshPublicKey?: string; keyFingerprint?: string }[], publicIp: string) {
      const r = await names.reconcile(servers, publicIp);
      const away = new Set([...r.elsewhere, ...r.deleted]);
      const taken = new Set(r.conflicts);
      const keys = servers.filter((x) => x.sshPublicKey && x.keyFingerprint && !away.has(x.id) && !taken.has(x.slug));
      await shared.recordKeys(keys.map((x) => ({ serverId: x.id, fingerprint: x.keyFingerprint!, publicKey: x.sshPublicKey! })));
      return r;
    },
    async place(p: { serverId: string; accountId: string; slug: string; publicIp: string; sshPublicKey?: string; keyFingerprint?: string }) {
      const placed = await names.place({ serverId: p.serverId, accountId: p.accountId, slug: p.slug, publicIp: p.publicIp });
      if (p.sshPublicKey && p.keyFingerprint) await shared.recordKey({ serverId: p.serverId, publicKey: p.sshPublicKey, fingerprint: p.keyFingerprint });
      return placed;
    },
    async remove(serverId: string) {
      await names.remove(serverId);
      await shared.removeKey(serverId);
    },
  };
}
