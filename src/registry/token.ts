// The cluster token (issue 35 item 2, as k3s does): `rootbox cluster init` makes it (or takes the
// operator's), every host is given it, and the registry holds only what it cannot be guessed
// from. Every secret the registry stores (the CA's key, the secrets that seal certificate keys,
// api keys and codes) is sealed under a key derived from it, so a dump, a backup or a standby's
// files open nothing; a verifier (an HMAC of a fixed label under another derived key) lets a host
// tell a wrong token at start, before it writes anything.
//
// Keys: HKDF-SHA256 of the token, one info string per purpose. Sealed values: a version byte
// (SEAL_V1: AES-256-GCM under the v1 key; a later rotation adds a version), a 12-byte IV, the
// 16-byte tag, the ciphertext; the purpose (which row) is the additional data, so a sealed value
// moved to another row does not open. The token itself is never logged nor stored.

import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { AppError } from '../errors.js';
import type { RegistryPool } from './pool.js';

/** Shortest token a host or init accepts (made ones are 43 characters of base64url). */
export const TOKEN_MIN = 16;
const SEAL_V1 = 1;
const SALT = Buffer.from('rootbox cluster token');
const VERIFY_LABEL = 'rootbox cluster token verifier v1';

type Query = Pick<RegistryPool, 'query'>;

/** A new cluster token: 32 random bytes, base64url, with a prefix that says what it is. */
export function newToken(): string {
  return `rbx1_${randomBytes(32).toString('base64url')}`;
}

/** The keys a token gives: the sealing key and the verifier. */
export class ClusterKeys {
  private readonly sealKey: Buffer;
  readonly verifier: Buffer;

  constructor(token: string) {
    const t = token.trim();
    if (t.length < TOKEN_MIN) throw AppError.of('cluster_token_missing', `the cluster token is shorter than ${TOKEN_MIN} characters`);
    const derive = (info: string) => Buffer.from(hkdfSync('sha256', t, SALT, info, 32));
    this.sealKey = derive('rootbox seal v1');
    this.verifier = createHmac('sha256', derive('rootbox verify v1')).update(VERIFY_LABEL).digest();
  }

  seal(plain: Buffer | string, purpose: string): Buffer {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.sealKey, iv);
    c.setAAD(Buffer.from(purpose));
    const body = Buffer.concat([c.update(typeof plain === 'string' ? Buffer.from(plain) : plain), c.final()]);
    return Buffer.concat([Buffer.from([SEAL_V1]), iv, c.getAuthTag(), body]);
  }

  /** The value `seal` sealed for `purpose`; cluster_token_wrong when it does not open. */
  open(sealed: Buffer, purpose: string): Buffer {
    if (sealed.length < 29 || sealed[0] !== SEAL_V1)
      throw AppError.of('cluster_token_wrong', `the registry's ${purpose} is sealed in a form this rootbox does not know`);
    try {
      const d = createDecipheriv('aes-256-gcm', this.sealKey, sealed.subarray(1, 13));
      d.setAAD(Buffer.from(purpose));
      d.setAuthTag(sealed.subarray(13, 29));
      return Buffer.concat([d.update(sealed.subarray(29)), d.final()]);
    } catch {
      throw AppError.of('cluster_token_wrong', `the registry's ${purpose} does not open with this cluster token`);
    }
  }
}

/** Whether the registry holds a token verifier (false too before schema 14). */
export async function hasToken(q: Query): Promise<boolean> {
  const t = await q.query<{ t: string | null }>(`SELECT to_regclass('cluster_token')::text AS t`);
  if (!t.rows[0]?.t) return false;
  return (await q.query('SELECT 1 FROM cluster_token WHERE id = 1')).rowCount === 1;
}

/** Checks `keys` against the registry's verifier, reading only: cluster_token_wrong on a
 *  mismatch, registry_not_initialized when init never stored one. */
export async function checkToken(q: Query, keys: ClusterKeys): Promise<void> {
  const r = await q.query<{ verifier: Buffer }>('SELECT verifier FROM cluster_token WHERE id = 1');
  const have = r.rows[0]?.verifier;
  if (!have) throw AppError.of('registry_not_initialized', 'the registry has no cluster token yet: run `rootbox cluster init` once');
  if (have.length !== keys.verifier.length || !timingSafeEqual(have, keys.verifier))
    throw AppError.of(
      'cluster_token_wrong',
      "this host's cluster token is not the one `rootbox cluster init` made for this registry: the host refuses to start",
    );
}

/** init: stores the verifier of `keys` unless one is there (then it must match). */
export async function storeToken(q: Query, keys: ClusterKeys): Promise<boolean> {
  const r = await q.query('INSERT INTO cluster_token (id, verifier) VALUES (1, $1) ON CONFLICT (id) DO NOTHING', [keys.verifier]);
  await checkToken(q, keys);
  return r.rowCount === 1;
}

/** Seals every secret still in clear (written before schema 14): the cluster secrets and the
 *  CA's key. Answers how many it sealed. Each row is sealed only if still clear (two hosts at
 *  once seal each once). */
export async function sealClear(q: Query, keys: ClusterKeys): Promise<number> {
  let n = 0;
  const secrets = await q.query<{ name: string; value: Buffer }>('SELECT name, value FROM cluster_secrets WHERE NOT sealed');
  for (const s of secrets.rows) {
    const r = await q.query('UPDATE cluster_secrets SET value = $2, sealed = true WHERE name = $1 AND NOT sealed', [
      s.name,
      keys.seal(s.value, secretPurpose(s.name)),
    ]);
    n += r.rowCount ?? 0;
  }
  const ca = await q.query<{ key_pem: string }>('SELECT key_pem FROM cluster_ca WHERE id = 1 AND NOT key_sealed');
  if (ca.rows[0]) {
    const sealed = keys.seal(ca.rows[0].key_pem, CA_PURPOSE).toString('base64');
    n += (await q.query('UPDATE cluster_ca SET key_pem = $1, key_sealed = true WHERE id = 1 AND NOT key_sealed', [sealed])).rowCount ?? 0;
  }
  return n;
}

export const CA_PURPOSE = 'cluster CA key';
export const secretPurpose = (name: string) => `cluster secret ${name}`;

/** Schema 14: the token's verifier, the sealed marks, each host's registered channel key. */
export const TOKEN_SQL = `
  CREATE TABLE cluster_token (
    id          int PRIMARY KEY CHECK (id = 1),
    verifier    bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
  );
  REVOKE ALL ON cluster_token FROM PUBLIC;
  ALTER TABLE cluster_secrets ADD COLUMN sealed boolean NOT NULL DEFAULT false;
  ALTER TABLE cluster_ca ADD COLUMN key_sealed boolean NOT NULL DEFAULT false;
  ALTER TABLE hosts ADD COLUMN channel_key text;`;
