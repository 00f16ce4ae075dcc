// Where accounts and SMS codes are kept: one interface, two backends chosen once at wiring. On a
// single box the store (LMDB) is the truth; in cluster mode the registry (PostgreSQL) is, and the
// store is a write-through cache of the accounts this host has seen (so the synchronous reads by
// id — tier, limits, billing — keep working): writes go to the registry first, then to the cache;
// a key is looked up in the registry (a rotated or revoked key is refused on every host), and
// only when the registry cannot be reached does a key this host has cached keep working here.
// A key no account has — as far as this host's memory of every account's key knows (the
// registry's change feed) — costs that lookup only within the per-source budget of misses.ts
// (a stranger's random keys cost no read per request); beyond it it is answered unread: 429 with
// Retry-After (it may be a key made on another host a moment ago, not in this host's memory yet),
// 401 only for a key the registry did not know a moment ago.

import { isAppError } from '../errors.js';
import { MissBudget } from '../misses.js';
import { tooMany } from '../ratelimit.js';
import type { AccountRecord, PendingCode, Store } from '../store/index.js';

/** Pending SMS codes and send history (store/codes.ts on a single box). */
export interface CodeBook {
  put(code: PendingCode): void | Promise<void>;
  remove(phone: string): void | Promise<void>;
  spendAttempt(phone: string): PendingCode | undefined | Promise<PendingCode | undefined>;
  /** Checks and records a send under every key at once (before the text goes out): `check` sees
   *  each key's send times within `keepMs`; its refusal is answered and nothing recorded. */
  reserveSend<T>(keys: string[], now: number, keepMs: number, check: (sends: number[][]) => T | undefined): T | undefined | Promise<T | undefined>;
  /** Gives back the send recorded at `at` (the provider did not take the text). */
  cancelSend(keys: string[], at: number): void | Promise<void>;
}

export interface AccountBook {
  /** The account holding this key hash (cached here after), or whether the hash was revoked;
   *  `ip`: the caller's address (what a key no account has may cost is counted per source). */
  byKeyHash(hash: string, ip?: string): Promise<{ account?: AccountRecord; revoked: boolean }>;
  byPhone(phone: string): Promise<AccountRecord | undefined>;
  /** An account by id: this host's cache, else (registry mode) the registry's, cached here. */
  byId(id: string): Promise<AccountRecord | undefined>;
  /** Records a new account; `alsoHere` runs in the same local transaction (a create's hold). */
  insert(rec: AccountRecord, alsoHere?: () => void): Promise<void>;
  /** Attaches a proven phone; the account as it is now, or undefined when the number is taken. */
  attachPhone(id: string, phone: string): Promise<AccountRecord | undefined>;
  rotateKey(id: string, keyHash: string, keyEnc: string): Promise<void>;
  /** After the store dropped an account a failed create made: the registry forgets it too. */
  forget(id: string): Promise<void>;
  all(): Promise<AccountRecord[]>;
  /** Servers of anonymous accounts made from `ip` that other hosts run (0 on a single box). */
  anonymousServersElsewhere(ip: string): Promise<number>;
  codes: CodeBook;
}

/** The registry's side (src/registry/accounts.ts), as hosting uses it. */
export interface SharedAccounts {
  byKeyHash(hash: string): Promise<Omit<AccountRecord, 'balanceUsd'> | undefined>;
  /** Whether some account's key has this hash as this host's memory has it (no read). */
  knows?(hash: string): boolean;
  byPhone(phone: string): Promise<Omit<AccountRecord, 'balanceUsd'> | undefined>;
  get(id: string): Promise<Omit<AccountRecord, 'balanceUsd'> | undefined>;
  isRevoked(hash: string): Promise<boolean>;
  insert(a: Omit<AccountRecord, 'balanceUsd'>): Promise<void>;
  attachPhone(id: string, phone: string): Promise<boolean>;
  rotateKey(id: string, keyHash: string, keyEnc: string): Promise<boolean>;
  remove(id: string): Promise<void>;
  all(): Promise<Omit<AccountRecord, 'balanceUsd'>[]>;
  anonymousPlacedElsewhere(ip: string): Promise<number>;
  putCode(c: PendingCode): Promise<void>;
  removeCode(phone: string): Promise<void>;
  spendAttempt(phone: string): Promise<PendingCode | undefined>;
  reserveSend<T>(keys: string[], now: number, keepMs: number, check: (sends: number[][]) => T | undefined): Promise<T | undefined>;
  cancelSend(keys: string[], at: number): Promise<void>;
}

/** Single box: the store alone. */
export class LocalAccounts implements AccountBook {
  readonly codes: CodeBook;

  constructor(private readonly store: Store) {
    this.codes = store.codes;
  }

  async byKeyHash(hash: string): Promise<{ account?: AccountRecord; revoked: boolean }> {
    const account = this.store.accounts.byKeyHash(hash);
    return account ? { account, revoked: false } : { revoked: this.store.accounts.isRevoked(hash) };
  }

  async byId(id: string): Promise<AccountRecord | undefined> {
    return this.store.accounts.get(id);
  }

  async byPhone(phone: string): Promise<AccountRecord | undefined> {
    return this.store.accounts.byPhone(phone);
  }

  async insert(rec: AccountRecord, alsoHere?: () => void): Promise<void> {
    this.store.atomically(() => {
      this.store.accounts.insert(rec);
      alsoHere?.();
    });
  }

  async attachPhone(id: string, phone: string): Promise<AccountRecord | undefined> {
    return this.store.accounts.attachPhone(id, phone) ? this.store.accounts.get(id) : undefined;
  }

  async rotateKey(id: string, keyHash: string, keyEnc: string): Promise<void> {
    this.store.accounts.rotateKey(id, keyHash, keyEnc);
  }

  async forget(): Promise<void> {}
  async anonymousServersElsewhere(): Promise<number> {
    return 0;
  }

  async all(): Promise<AccountRecord[]> {
    return this.store.accounts.all();
  }
}

const unavailable = (e: unknown) => isAppError(e) && e.code === 'registry_unavailable';

/** Cluster mode: the registry first, the store as this host's cache. */
export class RegistryAccountBook implements AccountBook {
  readonly codes: CodeBook;

  constructor(
    private readonly reg: SharedAccounts,
    private readonly store: Store,
    /** What keys no account has may cost in registry reads (shared with the API's other misses). */
    readonly misses = new MissBudget(),
  ) {
    this.codes = {
      put: (c) => reg.putCode(c),
      remove: (p) => reg.removeCode(p),
      spendAttempt: (p) => reg.spendAttempt(p),
      reserveSend: (k, n, keep, check) => reg.reserveSend(k, n, keep, check),
      cancelSend: (k, at) => reg.cancelSend(k, at),
    };
  }

  async byKeyHash(hash: string, ip?: string): Promise<{ account?: AccountRecord; revoked: boolean }> {
    // a key neither this host's memory of every key nor its cache has: a read only within the budget
    const stranger = ip !== undefined && this.reg.knows?.(hash) === false && !this.store.accounts.byKeyHash(hash);
    if (stranger && !this.misses.allow(hash, ip)) {
      if (this.misses.knownUnknown(hash)) return { revoked: false }; // the registry did not know it a moment ago
      // the source's budget is spent: the key may be valid (made on another host, not yet in this
      // host's memory), so not 401 but "try again", when the budget has a read again
      throw tooMany('rate_limited', 'too many unknown api keys from this address; this one may be new on another host', 1);
    }
    let found;
    try {
      found = await this.reg.byKeyHash(hash);
      if (!found) {
        if (stranger) this.misses.unknown(hash);
        const revoked = await this.reg.isRevoked(hash);
        if (this.store.accounts.byKeyHash(hash)) this.store.accounts.dropKey(hash, revoked);
        return { revoked };
      }
    } catch (e) {
      if (!unavailable(e)) throw e;
      // the registry is away: what this host has cached keeps working for its own servers
      const account = this.store.accounts.byKeyHash(hash);
      return account ? { account, revoked: false } : { revoked: this.store.accounts.isRevoked(hash) };
    }
    return { account: this.store.accounts.cache(found), revoked: false };
  }

  async byId(id: string): Promise<AccountRecord | undefined> {
    const here = this.store.accounts.get(id);
    if (here) return here;
    const found = await this.reg.get(id);
    return found ? this.store.accounts.cache(found) : undefined;
  }

  async byPhone(phone: string): Promise<AccountRecord | undefined> {
    const found = await this.reg.byPhone(phone);
    return found ? this.store.accounts.cache(found) : undefined;
  }

  async insert(rec: AccountRecord, alsoHere?: () => void): Promise<void> {
    const { balanceUsd: _, ...shared } = rec;
    await this.reg.insert(shared);
    this.store.atomically(() => {
      this.store.accounts.insert(rec);
      alsoHere?.();
    });
  }

  async attachPhone(id: string, phone: string): Promise<AccountRecord | undefined> {
    const here = this.store.accounts.get(id);
    if (!here || !(await this.reg.attachPhone(id, phone))) return undefined;
    const { balanceUsd: _, ...shared } = here;
    return this.store.accounts.cache({ ...shared, phone });
  }

  async rotateKey(id: string, keyHash: string, keyEnc: string): Promise<void> {
    await this.reg.rotateKey(id, keyHash, keyEnc);
    this.store.accounts.rotateKey(id, keyHash, keyEnc);
  }

  anonymousServersElsewhere(ip: string): Promise<number> {
    return this.reg.anonymousPlacedElsewhere(ip);
  }

  async forget(id: string): Promise<void> {
    await this.reg.remove(id);
  }

  /** Every account of the cluster, with the balance this host has cached (0 when none). */
  async all(): Promise<AccountRecord[]> {
    return (await this.reg.all()).map((a) => ({ ...a, balanceUsd: this.store.accounts.get(a.id)?.balanceUsd ?? 0 }));
  }
}
