// Accounts in the registry (cluster mode): every account with its api-key hash and ciphertext,
// its proven phone (unique), revoked key hashes, pending SMS codes and the send history that
// rate-limits codes per number and per address across hosts, and the cluster secret (32 random
// bytes made once by `rootbox cluster init`, sealed under the cluster token) under which every host encrypts api keys and MACs
// codes, so a key made on one host is handed back by a phone login on another. Balances are not
// here (the ledger's tables hold money).

import { randomBytes } from 'node:crypto';
import { AppError } from '../errors.js';
import type { RegistryPool } from './pool.js';
import { secretPurpose, type ClusterKeys } from './token.js';

export const ACCOUNTS_SQL = `
  CREATE TABLE accounts (
    id          text PRIMARY KEY,
    key_hash    text NOT NULL UNIQUE,
    key_enc     text NOT NULL,
    phone       text UNIQUE,
    created_ip  text NOT NULL,
    created_at  bigint NOT NULL,
    host        text NOT NULL
  );
  CREATE TABLE revoked_keys (
    key_hash    text PRIMARY KEY,
    account_id  text NOT NULL,
    revoked_at  timestamptz NOT NULL DEFAULT now()
  );
  CREATE TABLE sms_codes (
    phone          text PRIMARY KEY,
    code_mac       text NOT NULL,
    expires_at     bigint NOT NULL,
    attempts_left  int NOT NULL
  );
  CREATE TABLE sms_sends (
    key    text NOT NULL,
    at_ms  bigint NOT NULL
  );
  CREATE INDEX sms_sends_key ON sms_sends (key, at_ms);
  CREATE TABLE cluster_secrets (
    name   text PRIMARY KEY,
    value  bytea NOT NULL
  );`;

/** An account as the registry has it (no balance: that is the ledger's). */
export interface SharedAccount {
  id: string;
  keyHash: string;
  keyEnc: string;
  phone: string | null;
  createdIp: string;
  createdAt: number;
}

export interface SharedCode {
  phone: string;
  codeMac: string;
  expiresAt: number;
  attemptsLeft: number;
}

const COLS = 'id, key_hash, key_enc, phone, created_ip, created_at';
type Row = { id: string; key_hash: string; key_enc: string; phone: string | null; created_ip: string; created_at: string };
const toAccount = (r: Row): SharedAccount => ({
  id: r.id,
  keyHash: r.key_hash,
  keyEnc: r.key_enc,
  phone: r.phone,
  createdIp: r.created_ip,
  createdAt: Number(r.created_at),
});
/** First key of the advisory locks a send reservation takes per key (its own class). */
const SMS_LOCK = 35005;
const isUnique = (e: unknown) => (e as { code?: string }).code === '23505';

/** The cluster secret for api keys and code MACs: made once (here by init), read by every host;
 *  stored sealed under the cluster token (token.ts), opened here with `keys`. */
export async function clusterSecret(q: Pick<RegistryPool, 'query'>, keys: ClusterKeys, make = false, name = 'api_keys'): Promise<Buffer | undefined> {
  if (make)
    await q.query('INSERT INTO cluster_secrets (name, value, sealed) VALUES ($1, $2, true) ON CONFLICT (name) DO NOTHING', [
      name,
      keys.seal(randomBytes(32), secretPurpose(name)),
    ]);
  const r = await q.query<{ value: Buffer; sealed: boolean }>('SELECT value, sealed FROM cluster_secrets WHERE name = $1', [name]);
  const x = r.rows[0];
  // one still in clear (written before schema 14, not yet sealed by init or a host's start)
  return x && (x.sealed ? keys.open(x.value, secretPurpose(name)) : x.value);
}

/** What this host's placement cache knows of every account's key (placements.ts, sharedmaps.ts). */
export interface KnownKeys {
  readonly loaded: boolean;
  readonly accountKeys: { byHash(hash: string): string | undefined };
}

export class RegistryAccounts {
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
    private readonly known?: KnownKeys,
    /** The cluster token's keys (a host has them; the CLI's listing does not need them). */
    private readonly keys?: ClusterKeys,
  ) {}

  /** Whether some account's current key has this hash, as this host's memory has it (no read);
   *  true while that memory is not loaded yet (then every key is worth a read). */
  knows(hash: string): boolean {
    return !this.known?.loaded || this.known.accountKeys.byHash(hash) !== undefined;
  }

  /** The cluster secret (made here if init has not made it yet: any member may). */
  async secret(): Promise<Buffer> {
    if (!this.keys) throw AppError.of('cluster_token_missing', 'the cluster secret is opened only with the cluster token');
    return (await clusterSecret(this.pool, this.keys, true))!;
  }

  async byKeyHash(hash: string): Promise<SharedAccount | undefined> {
    const r = await this.pool.query<Row>(`SELECT ${COLS} FROM accounts WHERE key_hash = $1`, [hash]);
    return r.rows[0] ? toAccount(r.rows[0]) : undefined;
  }

  async byPhone(phone: string): Promise<SharedAccount | undefined> {
    const r = await this.pool.query<Row>(`SELECT ${COLS} FROM accounts WHERE phone = $1`, [phone]);
    return r.rows[0] ? toAccount(r.rows[0]) : undefined;
  }

  async get(id: string): Promise<SharedAccount | undefined> {
    const r = await this.pool.query<Row>(`SELECT ${COLS} FROM accounts WHERE id = $1`, [id]);
    return r.rows[0] ? toAccount(r.rows[0]) : undefined;
  }

  async isRevoked(hash: string): Promise<boolean> {
    return (await this.pool.query('SELECT 1 FROM revoked_keys WHERE key_hash = $1', [hash])).rowCount === 1;
  }

  /** Records a new account; 409 phone_taken when another host just took its phone. */
  async insert(a: SharedAccount): Promise<void> {
    await this.pool
      .query(`INSERT INTO accounts (${COLS}, host) VALUES ($1, $2, $3, $4, $5, $6, $7)`, [
        a.id,
        a.keyHash,
        a.keyEnc,
        a.phone,
        a.createdIp,
        a.createdAt,
        this.host,
      ])
      .catch((e: unknown) => {
        if (isUnique(e) && a.phone && /phone/.test((e as { constraint?: string }).constraint ?? ''))
          throw AppError.of('phone_taken', `${a.phone} was verified for another account at the same instant; send a new code to log in with it`);
        throw e;
      });
  }

  /** Attaches a proven phone to an account without one; false when the number is taken. */
  async attachPhone(id: string, phone: string): Promise<boolean> {
    try {
      const r = await this.pool.query('UPDATE accounts SET phone = $2 WHERE id = $1 AND (phone IS NULL OR phone = $2)', [id, phone]);
      return r.rowCount === 1;
    } catch (e) {
      if (isUnique(e)) return false;
      throw e;
    }
  }

  /** Replaces the key; the old hash is remembered as revoked, in one transaction. */
  async rotateKey(id: string, keyHash: string, keyEnc: string): Promise<boolean> {
    return this.pool.tx(async (c) => {
      const old = await c.query<{ key_hash: string }>('SELECT key_hash FROM accounts WHERE id = $1 FOR UPDATE', [id]);
      if (!old.rows[0]) return false;
      await c.query('INSERT INTO revoked_keys (key_hash, account_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [old.rows[0].key_hash, id]);
      await c.query('UPDATE accounts SET key_hash = $2, key_enc = $3 WHERE id = $1', [id, keyHash, keyEnc]);
      return true;
    });
  }

  /** Removes an account made by a create that failed (never one with a phone). */
  async remove(id: string): Promise<void> {
    await this.pool.query('DELETE FROM accounts WHERE id = $1 AND phone IS NULL', [id]);
  }

  /** Servers other hosts run for anonymous accounts made from `ip` (the per-IP cap counts them). */
  async anonymousPlacedElsewhere(ip: string): Promise<number> {
    const r = await this.pool.query<{ n: string }>(
      `SELECT count(*) AS n FROM placements p JOIN accounts a ON a.id = p.account_id
        WHERE a.created_ip = $1 AND a.phone IS NULL AND p.host <> $2 AND p.lost_at IS NULL`,
      [ip, this.host],
    );
    return Number(r.rows[0]?.n ?? 0);
  }

  async all(): Promise<SharedAccount[]> {
    return (await this.pool.query<Row>(`SELECT ${COLS} FROM accounts ORDER BY created_at`)).rows.map(toAccount);
  }

  async putCode(c: SharedCode): Promise<void> {
    await this.pool.query(
      `INSERT INTO sms_codes (phone, code_mac, expires_at, attempts_left) VALUES ($1, $2, $3, $4)
       ON CONFLICT (phone) DO UPDATE SET code_mac = $2, expires_at = $3, attempts_left = $4`,
      [c.phone, c.codeMac, c.expiresAt, c.attemptsLeft],
    );
  }

  async removeCode(phone: string): Promise<void> {
    await this.pool.query('DELETE FROM sms_codes WHERE phone = $1', [phone]);
  }

  /** Spends one attempt atomically; the record as it was before, or undefined. */
  async spendAttempt(phone: string): Promise<SharedCode | undefined> {
    return this.pool.tx(async (c) => {
      const r = await c.query<{ code_mac: string; expires_at: string; attempts_left: number }>(
        'SELECT code_mac, expires_at, attempts_left FROM sms_codes WHERE phone = $1 FOR UPDATE',
        [phone],
      );
      const row = r.rows[0];
      if (!row) return undefined;
      if (row.attempts_left > 0) await c.query('UPDATE sms_codes SET attempts_left = attempts_left - 1 WHERE phone = $1', [phone]);
      return { phone, codeMac: row.code_mac, expiresAt: Number(row.expires_at), attemptsLeft: row.attempts_left };
    });
  }

  /** Checks and records one send under every key in one transaction, each key's advisory lock
   *  held (so concurrent requests on any host see each other's sends before the text goes out):
   *  `check` gets each key's send times within `keepMs`, oldest first; a refusal it answers is
   *  returned and nothing is recorded. */
  async reserveSend<T>(keys: string[], now: number, keepMs: number, check: (sends: number[][]) => T | undefined): Promise<T | undefined> {
    return this.pool.tx(async (c) => {
      for (const k of [...keys].sort()) await c.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [SMS_LOCK, k]);
      await c.query('DELETE FROM sms_sends WHERE key = ANY($1) AND at_ms <= $2', [keys, now - keepMs]);
      const r = await c.query<{ key: string; at_ms: string }>('SELECT key, at_ms FROM sms_sends WHERE key = ANY($1) ORDER BY at_ms', [keys]);
      const refused = check(keys.map((k) => r.rows.filter((x) => x.key === k).map((x) => Number(x.at_ms))));
      if (refused !== undefined) return refused;
      for (const k of keys) await c.query('INSERT INTO sms_sends (key, at_ms) VALUES ($1, $2)', [k, now]);
      return undefined;
    });
  }

  /** Gives back a send reserveSend recorded at `at` (the text was not sent). */
  async cancelSend(keys: string[], at: number): Promise<void> {
    await this.pool.query('DELETE FROM sms_sends WHERE ctid IN (SELECT DISTINCT ON (key) ctid FROM sms_sends WHERE key = ANY($1) AND at_ms = $2)', [keys, at]);
  }
}
