// Accounts: the api_key's hash (lookup index) and its AES-GCM ciphertext (so a phone login can
// hand back the same key), the verified phone (index), balance, and revoked key hashes. This
// class is the only writer of the accounts database; a balance changes only through addBalance,
// which billing's charge and credit call inside their transaction with the ledger entry.

import type { LmdbEnv } from './db.js';

export interface AccountRecord {
  id: string;
  /** hex SHA-256 of the api_key. */
  keyHash: string;
  /** base64 of iv ‖ tag ‖ ciphertext of the api_key under the host secret. */
  keyEnc: string;
  /** E.164 number once proven by a code; null for anonymous accounts. */
  phone: string | null;
  /** Source IP of the call that created the account. */
  createdIp: string;
  createdAt: number;
  balanceUsd: number;
}

export class AccountStore {
  private readonly db;
  private readonly keys;
  private readonly phones;
  private readonly revoked;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<AccountRecord>('accounts');
    this.keys = env.db<string>('account_keys');
    this.phones = env.db<string>('account_phones');
    this.revoked = env.db<number>('revoked_keys');
  }

  get(id: string): AccountRecord | undefined {
    return this.db.get(id);
  }

  byKeyHash(hash: string): AccountRecord | undefined {
    const id = this.keys.get(hash);
    return id ? this.db.get(id) : undefined;
  }

  isRevoked(hash: string): boolean {
    return this.revoked.get(hash) !== undefined;
  }

  byPhone(phone: string): AccountRecord | undefined {
    const id = this.phones.get(phone);
    return id ? this.db.get(id) : undefined;
  }

  insert(rec: AccountRecord): void {
    this.env.txSync(() => {
      this.db.putSync(rec.id, rec);
      this.keys.putSync(rec.keyHash, rec.id);
      if (rec.phone) this.phones.putSync(rec.phone, rec.id);
    });
  }

  /** Attaches a proven phone; false when the number already belongs to another account. */
  attachPhone(id: string, phone: string): boolean {
    return this.env.txSync(() => {
      const owner = this.phones.get(phone);
      if (owner !== undefined && owner !== id) return false;
      const rec = this.db.get(id);
      if (!rec) return false;
      this.db.putSync(id, { ...rec, phone });
      this.phones.putSync(phone, id);
      return true;
    });
  }

  /** Replaces the key: the old hash stops working and is remembered as revoked. */
  rotateKey(id: string, keyHash: string, keyEnc: string): void {
    this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return;
      this.keys.removeSync(rec.keyHash);
      this.revoked.putSync(rec.keyHash, Date.now());
      this.keys.putSync(keyHash, id);
      this.db.putSync(id, { ...rec, keyHash, keyEnc });
    });
  }

  /** Cluster mode: the account as the registry has it, cached here (indexes follow; a key hash
   *  it no longer has is revoked here too). The cached balance is left as it is (the ledger
   *  refreshes it); a new record starts at 0. */
  cache(rec: Omit<AccountRecord, 'balanceUsd'>): AccountRecord {
    // every authenticated request lands here: an account and indexes already as the registry has them cost no write
    const had = this.db.get(rec.id);
    if (
      had &&
      had.keyHash === rec.keyHash &&
      had.keyEnc === rec.keyEnc &&
      had.phone === rec.phone &&
      had.createdIp === rec.createdIp &&
      had.createdAt === rec.createdAt &&
      this.keys.get(rec.keyHash) === rec.id &&
      (!rec.phone || this.phones.get(rec.phone) === rec.id)
    )
      return had;
    return this.env.txSync(() => {
      const old = this.db.get(rec.id);
      if (old && old.keyHash !== rec.keyHash) {
        this.keys.removeSync(old.keyHash);
        this.revoked.putSync(old.keyHash, Date.now());
      }
      if (old?.phone && old.phone !== rec.phone && this.phones.get(old.phone) === rec.id) this.phones.removeSync(old.phone);
      const next: AccountRecord = { ...rec, balanceUsd: old?.balanceUsd ?? 0 };
      this.db.putSync(rec.id, next);
      this.keys.putSync(rec.keyHash, rec.id);
      if (rec.phone) this.phones.putSync(rec.phone, rec.id);
      return next;
    });
  }

  /** Cluster mode: a key hash the registry does not know (any more) stops working here. */
  dropKey(hash: string, revoked: boolean): void {
    this.env.txSync(() => {
      this.keys.removeSync(hash);
      if (revoked) this.revoked.putSync(hash, Date.now());
    });
  }

  /** Adds (or with a negative amount, takes) balance atomically; returns the new balance, or
   *  undefined (nothing written) when there is no such account. Called by BillingStore only:
   *  every change of a balance has its ledger entry in the same transaction. */
  addBalance(id: string, usd: number): number | undefined {
    return this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return undefined;
      const balanceUsd = Math.round((rec.balanceUsd + usd) * 1e9) / 1e9;
      this.db.putSync(id, { ...rec, balanceUsd });
      return balanceUsd;
    });
  }

  /** Cluster mode: the balance as the registry has it (this record caches it); false when there
   *  is no such account here. Called by BillingStore only. */
  setBalance(id: string, balanceUsd: number): boolean {
    return this.env.patch(this.db, id, () => ({ balanceUsd })) !== undefined;
  }

  /** Removes an account made by a call that then failed (it never held a server). */
  remove(id: string): void {
    this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return;
      this.db.removeSync(id);
      this.keys.removeSync(rec.keyHash);
      if (rec.phone && this.phones.get(rec.phone) === id) this.phones.removeSync(rec.phone);
    });
  }

  all(): AccountRecord[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }
}
