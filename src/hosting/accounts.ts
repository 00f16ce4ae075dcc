// Accounts and credentials: anonymous sign-up, Bearer authentication (hash lookup, constant-time
// compare, revocation), key rotation, and tiers (anonymous → verified with a proven phone →
// paid with a positive balance) with their per-server ceilings (spec part 8). Accounts are kept
// by an AccountBook (directory.ts): the store on a single box, the registry in cluster mode.

import { randomBytes } from 'node:crypto';
import { AppError } from '../errors.js';
import type { AccountRecord, Store } from '../store/index.js';
import type { AccountBook } from './directory.js';
import { API_KEY_RE, hashKey, newApiKey, sameHash, type KeySecret } from './keys.js';

export type Tier = 'anonymous' | 'verified' | 'paid';

const MB = 1024 * 1024;
const GB = 1024 * MB;
export const TIER_LIMITS: Record<Tier, { memoryBytes: number; diskBytes: number }> = {
  anonymous: { memoryBytes: 256 * MB, diskBytes: 256 * MB },
  verified: { memoryBytes: 2 * GB, diskBytes: 1 * GB },
  paid: { memoryBytes: 4 * GB, diskBytes: 5 * GB },
};

export const tierOf = (a: AccountRecord): Tier => (a.balanceUsd > 0 ? 'paid' : a.phone ? 'verified' : 'anonymous');

export class Accounts {
  constructor(
    private readonly store: Store,
    private readonly secret: KeySecret,
    readonly book: AccountBook,
  ) {}

  /** Resolves `Authorization: Bearer rbx_…` to its account; 401 with a precise code otherwise.
   *  `ip`: the caller's address (a key no account has costs reads within its source's budget). */
  async authenticate(header: string | string[] | undefined, ip?: string): Promise<AccountRecord> {
    if (typeof header !== 'string' || header.length === 0) {
      throw AppError.of('missing_api_key', 'send your api_key as `Authorization: Bearer <API_KEY>`', { headers: { 'www-authenticate': 'Bearer' } });
    }
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m || !API_KEY_RE.test(m[1])) {
      throw AppError.of('invalid_api_key', 'the Authorization header must be `Bearer rbx_` followed by 32 letters and digits', {
        headers: { 'www-authenticate': 'Bearer error="invalid_token"' },
      });
    }
    const hash = hashKey(m[1]);
    const { account: acc, revoked } = await this.book.byKeyHash(hash, ip);
    if (!acc || !sameHash(acc.keyHash, hash)) {
      throw AppError.of(
        revoked ? 'revoked_api_key' : 'invalid_api_key',
        revoked ? 'this api_key was replaced by a newer one and no longer works' : 'no account has this api_key',
        {
          headers: { 'www-authenticate': 'Bearer error="invalid_token"' },
        },
      );
    }
    return acc;
  }

  /** A new account; `alsoHere` runs in the store's transaction that records it (a create's hold). */
  async create(ip: string, phone: string | null = null, alsoHere?: (account: AccountRecord) => void): Promise<{ account: AccountRecord; apiKey: string }> {
    await this.secret.ready?.();
    const apiKey = newApiKey();
    const account: AccountRecord = {
      id: `acc_${randomBytes(8).toString('hex')}`,
      keyHash: hashKey(apiKey),
      keyEnc: this.secret.encrypt(apiKey),
      phone,
      createdIp: ip,
      createdAt: Date.now(),
      balanceUsd: 0,
    };
    await this.book.insert(account, alsoHere && (() => alsoHere(account)));
    return { account, apiKey };
  }

  /** The account's current key, recovered from its ciphertext (phone login). */
  async keyOf(account: AccountRecord): Promise<string> {
    await this.secret.ready?.();
    return this.secret.decrypt(account.keyEnc);
  }

  async rotate(account: AccountRecord): Promise<string> {
    await this.secret.ready?.();
    const apiKey = newApiKey();
    await this.book.rotateKey(account.id, hashKey(apiKey), this.secret.encrypt(apiKey));
    return apiKey;
  }

  /** Servers held by anonymous accounts created from this IP (the per-IP cap counts these),
   *  creates in flight included so concurrent creates cannot pass the cap together (a crashed
   *  run's pending servers are gone before the API listens); in cluster mode also those other
   *  hosts run, from the registry. */
  async anonymousServersFromIp(ip: string): Promise<number> {
    let n = await this.book.anonymousServersElsewhere(ip);
    for (const s of this.store.servers.all({ withPending: true })) {
      const a = this.store.accounts.get(s.accountId);
      if (a && !a.phone && a.createdIp === ip) n++;
    }
    return n;
  }
}
