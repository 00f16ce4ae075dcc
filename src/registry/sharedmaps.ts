// What every host keeps in memory of shared tables a stranger could otherwise make it read per
// request (issue 29: every shared resource has a per-source bound):
//   - the servers' SSH public keys (`server_keys`): a login with a key no server of this host has
//     is answered from memory — the server of another host it belongs to, or unknown;
//   - the HTTP-01 answers of the orders under way (`acme_challenges`): the CA reaching this host
//     for a token another host's order wrote is answered from memory;
//   - every account's current api-key hash (`accounts`): a key no account has is known to be
//     unknown without a registry read (a read for it is spent only within the per-source budget,
//     misses.ts).
// The placement cache's one catch-up fills these maps from the change feed (feed.ts, kinds `key`,
// `challenge`, `account`: loaded whole at start, followed by LISTEN/NOTIFY, the cache's timer as
// the safety net), as it does the custom domains (domainmap.ts); each map takes its own kind. A
// key re-recorded unchanged (a host's start) writes no new version. What a map lacks may have
// been written a moment ago (its notification not in yet): callers read once more within a
// budget per source (misses.ts).

import type { Change } from './feed.js';

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

  /** Applies a change of the feed if it is a server key's (the key, or its tombstone); false otherwise. */
  take(c: Change): boolean {
    if (c.kind !== 'key') return false;
    this.apply(c.key, c.row && { fingerprint: c.row.fingerprint, host: c.row.host, publicKey: c.row.public_key }, c.version);
    return true;
  }

  /** A server's key, or its tombstone (`key` undefined). */
  private apply(serverId: string, key: Omit<KnownKey, 'serverId' | 'version'> | undefined, version: number): void {
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

  /** Applies a change of the feed if it is an HTTP-01 answer's (or its tombstone); false otherwise. */
  take(c: Change): boolean {
    if (c.kind !== 'challenge') return false;
    this.apply(c.key, c.row && { keyAuthorization: c.row.key_authorization, expiresAt: Date.parse(c.row.expires_at) }, c.version);
    return true;
  }

  /** A token's answer, or its tombstone (`c` undefined). */
  private apply(token: string, c: Omit<Challenge, 'version'> | undefined, version: number): void {
    const had = this.tokens.get(token);
    if (had && had.version > version) return;
    if (c) this.tokens.set(token, { ...c, version });
    else this.tokens.delete(token);
  }
}

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

  /** Applies a change of the feed if it is an account's (its key hash, or its tombstone); false otherwise. */
  take(c: Change): boolean {
    if (c.kind !== 'account') return false;
    this.apply(c.key, c.row?.key_hash, c.version);
    return true;
  }

  /** An account's key hash, or its tombstone (`hash` undefined). */
  private apply(accountId: string, hash: string | undefined, version: number): void {
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
