// Servers' own domains: one record per domain name (so a name has one holder at a time), with
// its server, account, ownership token and state; and per domain the times of its recent
// certificate orders (kept when the domain is removed, so deleting and adding again does not
// buy more orders). Every write commits with a synced transaction.

import type { LmdbEnv } from './db.js';

export type DomainState = 'pending_dns' | 'issuing' | 'active' | 'failed';

export interface DomainRecord {
  domain: string;
  serverId: string;
  accountId: string;
  /** Value the owner publishes in TXT _rootbox.<domain>. */
  token: string;
  state: DomainState;
  /** A zone apex (A/AAAA asked for instead of a CNAME). */
  apex?: boolean;
  /** Why the domain is failed, or what its last check found missing. */
  reason?: string;
  createdAt: number;
  checkedAt?: number;
  activeAt?: number;
}

export class DomainStore {
  private readonly db;
  private readonly orders;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<DomainRecord>('domains');
    this.orders = env.db<number[]>('domain_orders');
  }

  get(domain: string): DomainRecord | undefined {
    return this.db.get(domain);
  }

  all(): DomainRecord[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }

  byServer(serverId: string): DomainRecord[] {
    return this.all().filter((d) => d.serverId === serverId);
  }

  byAccount(accountId: string): DomainRecord[] {
    return this.all().filter((d) => d.accountId === accountId);
  }

  /** Writes the record when `allowed(current)` says so, in one transaction; returns what is stored after. */
  claim(rec: DomainRecord, allowed: (current: DomainRecord | undefined) => boolean): { stored: DomainRecord; written: boolean } {
    return this.env.txSync(() => {
      const cur = this.db.get(rec.domain);
      if (!allowed(cur)) return { stored: cur!, written: false };
      this.db.putSync(rec.domain, rec);
      return { stored: rec, written: true };
    });
  }

  /** Changes a record only while it still belongs to `serverId`; undefined when it does not. */
  update(domain: string, serverId: string, change: Partial<DomainRecord>): DomainRecord | undefined {
    return this.env.txSync(() => {
      const cur = this.db.get(domain);
      if (!cur || cur.serverId !== serverId) return undefined;
      const next = { ...cur, ...change };
      this.db.putSync(domain, next);
      return next;
    });
  }

  /** Removes the record while it belongs to `serverId`; false when it did not. */
  remove(domain: string, serverId: string): boolean {
    return this.env.txSync(() => {
      if (this.db.get(domain)?.serverId !== serverId) return false;
      this.db.removeSync(domain);
      return true;
    });
  }

  /** Times of the domain's certificate orders since `since`. */
  ordersSince(domain: string, since: number): number[] {
    return (this.orders.get(domain) ?? []).filter((t) => t >= since);
  }

  /** Records one order at `at`, forgetting those before `since`. */
  addOrder(domain: string, at: number, since: number): void {
    this.env.txSync(() => this.orders.putSync(domain, [...this.ordersSince(domain, since), at]));
  }
}
