// What every host keeps in memory of two shared tables a stranger could otherwise make it read
// per request (schema 12, issue 29: every shared resource has a per-source bound):
//   - the servers' SSH public keys (`server_keys`): a login with a key no server of this host has
//     is answered from memory — the server of another host it belongs to, or unknown;
//   - the HTTP-01 answers of the orders under way (`acme_challenges`): the CA reaching this host
//     for a token another host's order wrote is answered from memory.
// Rows of both are numbered from the placements' sequence (same advisory lock: versions commit in
// order), a removal leaves a tombstone (kind 'k' for a key, 'c' for a token), and each change
// NOTIFYs `rootbox_placements` with "k:<version>" or "c:<version>": the placement cache's one
// catch-up fills these maps (loaded whole at start, followed by LISTEN/NOTIFY, the cache's timer
// as the safety net), as it does the custom domains (domainmap.ts). A key re-recorded unchanged
// (a host's start) writes no new version. What a map lacks may have been written a moment ago
// (its notification not in yet): callers read once more within a budget per source (misses.ts).

import { PLACEMENT_CHANNEL } from './placements-sql.js';

export const SHARED_MAPS_SQL = `
  ALTER TABLE server_keys ADD COLUMN version bigint NOT NULL DEFAULT 0;
  ALTER TABLE acme_challenges ADD COLUMN version bigint NOT NULL DEFAULT 0;
  -- arguments: the tombstone kind, the key column
  CREATE FUNCTION rootbox_shared_version() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    k text := TG_ARGV[0];
    v bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(1886151011);
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version) VALUES (k, to_jsonb(OLD) ->> TG_ARGV[1], v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${PLACEMENT_CHANNEL}', k || ':' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = k AND key = to_jsonb(NEW) ->> TG_ARGV[1];
    END IF;
    PERFORM pg_notify('${PLACEMENT_CHANNEL}', k || ':' || v);
    RETURN NEW;
  END $$;
  CREATE TRIGGER server_keys_version BEFORE INSERT OR UPDATE OR DELETE ON server_keys
    FOR EACH ROW EXECUTE FUNCTION rootbox_shared_version('k', 'server_id');
  CREATE TRIGGER acme_challenges_version BEFORE INSERT OR UPDATE OR DELETE ON acme_challenges
    FOR EACH ROW EXECUTE FUNCTION rootbox_shared_version('c', 'token');
  UPDATE server_keys SET host = host; -- numbers the rows written before (the trigger)
  UPDATE acme_challenges SET token = token;
  CREATE INDEX server_keys_version ON server_keys (version);
  CREATE INDEX acme_challenges_version ON acme_challenges (version);`;

/** The catch-up's part for keys ('k': server_id, fingerprint, host, public key; 'y' its
 *  tombstone) and challenges ('c': token, key authorization, expiry in ms; 'z' its tombstone):
 *  rows above $1, tombstones above $2 (a full load asks for none). */
export const SHARED_MAPS_CATCH_UP = `
  SELECT 'k' AS kind, server_id, fingerprint AS slug, host, NULL, NULL, public_key AS public_ip, version FROM server_keys WHERE version > $1
  UNION ALL
  SELECT 'y', key, NULL, NULL, NULL, NULL, NULL, version FROM placement_tombstones WHERE kind = 'k' AND version > $2
  UNION ALL
  SELECT 'c', token, key_authorization, NULL, (extract(epoch FROM expires_at) * 1000)::bigint, NULL, NULL, version FROM acme_challenges WHERE version > $1
  UNION ALL
  SELECT 'z', key, NULL, NULL, NULL, NULL, NULL, version FROM placement_tombstones WHERE kind = 'c' AND version > $2`;

export interface KnownKey {
  serverId: string;
  fingerprint: string;
  /** The OpenSSH public key line. */
  publicKey: string;
  /** The host that recorded it (the server's). */
  host: string;
  version: number;
}

export class KeyMap {
  private readonly servers = new Map<string, KnownKey>();
  private readonly fingerprints = new Map<string, KnownKey[]>();

  /** The servers whose key has this fingerprint (SHA256, base64 without padding), any host's. */
  byFingerprint(fingerprint: string): readonly KnownKey[] {
    return this.fingerprints.get(fingerprint) ?? [];
  }

  get size(): number {
    return this.servers.size;
  }

  /** Forgets every key (a full load follows). */
  clear(): void {
    this.servers.clear();
    this.fingerprints.clear();
  }

  /** One catch-up row: a server's key, or its tombstone (`key` undefined). */
  apply(serverId: string, key: Omit<KnownKey, 'serverId' | 'version'> | undefined, version: number): void {
    const had = this.servers.get(serverId);
    if (had && had.version > version) return;
    if (had) {
      const rest = this.byFingerprint(had.fingerprint).filter((k) => k.serverId !== serverId);
      if (rest.length) this.fingerprints.set(had.fingerprint, rest);
      else this.fingerprints.delete(had.fingerprint);
      this.servers.delete(serverId);
    }
    if (!key) return;
    const k: KnownKey = { serverId, ...key, version };
    this.servers.set(serverId, k);
    this.fingerprints.set(
      k.fingerprint,
      [...this.byFingerprint(k.fingerprint), k].sort((x, y) => (x.serverId < y.serverId ? -1 : 1)),
    );
  }
}

interface Challenge {
  keyAuthorization: string;
  /** Wall-clock ms (the registry's expiry). */
  expiresAt: number;
  version: number;
}

export class ChallengeMap {
  private readonly tokens = new Map<string, Challenge>();

  constructor(private readonly clock: () => number = Date.now) {}

  /** The key authorization of a token some host's order wrote, while it has not expired. */
  get(token: string): string | undefined {
    const c = this.tokens.get(token);
    return c && c.expiresAt > this.clock() ? c.keyAuthorization : undefined;
  }

  get size(): number {
    return this.tokens.size;
  }

  /** Forgets every token (a full load follows). */
  clear(): void {
    this.tokens.clear();
  }

  /** One catch-up row: a token's answer, or its tombstone (`c` undefined). */
  apply(token: string, c: Omit<Challenge, 'version'> | undefined, version: number): void {
    const had = this.tokens.get(token);
    if (had && had.version > version) return;
    if (c) this.tokens.set(token, { ...c, version });
    else this.tokens.delete(token);
  }
}

/** Schema 16: accounts join the same feed (kind 'a', keyed by account id), so every host knows
 *  every account's current api-key hash: a key no account has is known to be unknown without a
 *  registry read, and a read for it is spent only within the per-source budget (misses.ts). */
export const ACCOUNT_KEYS_SQL = `
  ALTER TABLE accounts ADD COLUMN version bigint NOT NULL DEFAULT 0;
  CREATE TRIGGER accounts_version BEFORE INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION rootbox_shared_version('a', 'id');
  UPDATE accounts SET host = host; -- numbers the rows written before (the trigger)
  CREATE INDEX accounts_version ON accounts (version);`;

/** The catch-up's part for accounts ('a': account id, its key hash; 'b' its tombstone). */
export const ACCOUNT_KEYS_CATCH_UP = `
  SELECT 'a', id, key_hash, NULL, NULL, NULL, NULL, version FROM accounts WHERE version > $1
  UNION ALL
  SELECT 'b', key, NULL, NULL, NULL, NULL, NULL, version FROM placement_tombstones WHERE kind = 'a' AND version > $2`;

/** Every account's current api-key hash (SHA-256 hex), any host's. */
export class AccountKeyMap {
  private readonly accounts = new Map<string, { hash: string; version: number }>();
  private readonly hashes = new Map<string, string>();

  /** The account whose current key has this hash. */
  byHash(hash: string): string | undefined {
    return this.hashes.get(hash);
  }

  get size(): number {
    return this.accounts.size;
  }

  /** Forgets every account (a full load follows). */
  clear(): void {
    this.accounts.clear();
    this.hashes.clear();
  }

  /** One catch-up row: an account's key hash, or its tombstone (`hash` undefined). */
  apply(accountId: string, hash: string | undefined, version: number): void {
    const had = this.accounts.get(accountId);
    if (had && had.version > version) return;
    if (had && this.hashes.get(had.hash) === accountId) this.hashes.delete(had.hash);
    if (!hash) {
      this.accounts.delete(accountId);
      return;
    }
    this.accounts.set(accountId, { hash, version });
    this.hashes.set(hash, accountId);
  }
}
