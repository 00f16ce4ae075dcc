// Billing records: per-server meter cursors, the usage ledger, per-account usage totals and
// billing state, and applied credits. A metered period is charged in one transaction that also
// moves the server's cursor, so a crash or restart neither charges a period twice nor skips it.
// Balances are the account store's: charge and credit change them through AccountStore, inside
// their own transaction, and never open the accounts database themselves.

import type { AccountRecord, AccountStore } from './accounts.js';
import type { LmdbEnv } from './db.js';
import { periodCost, round9, type Grant, type Prices } from '../price.js';

export interface MeterCursor {
  /** End of the last charged period (ms). */
  at: number;
  /** Egress counter value at `at`. */
  egress: number;
}

export interface Usage {
  ramGbHours: number;
  egressGb: number;
  diskGbMonths: number;
  /** GB-months of checkpoint storage (absent in totals written before checkpoints were billed). */
  checkpointGbMonths?: number;
  /** Dollars drawn from the balance by usage. */
  spentUsd: number;
  /** Cluster mode: bytes the account's checkpoints hold now on the other hosts, as the registry
   *  said last (absent: none). */
  checkpointBytesElsewhere?: number;
}

export interface LedgerEntry {
  kind: 'usage' | 'credit';
  accountId: string;
  serverId?: string;
  from: number;
  to: number;
  ramGbHours: number;
  diskGbMonths: number;
  /** GB-months of checkpoint storage (absent: none, or an entry from before they were billed). */
  checkpointGbMonths?: number;
  egressGb: number;
  /** Dollars: drawn from the balance (usage) or added to it (credit). */
  usd: number;
  /** For credits: where they came from (`x402:<payer>:<nonce>`, `admin`). */
  source?: string;
}

/** Cluster mode: a metered period or a credit waiting to be written to the registry's ledger
 *  (billing/book.ts); removed once the registry committed it. */
export type OutboxEntry =
  | (Omit<LedgerEntry, 'kind' | 'usd' | 'source'> & { kind: 'usage'; serverId: string; grant: Grant; prices: Prices })
  | { kind: 'credit'; accountId: string; usd: number; source: string; at: number };
export type OutboxKey = ['u', string, number] | ['c', string];

export interface BillingState {
  /** When the grant and the balance were first seen used up (cleared when credit returns). */
  exhaustedAt?: number;
  suspended?: boolean;
}

export type { Grant, Prices };

export const ZERO_USAGE: Usage = { ramGbHours: 0, egressGb: 0, diskGbMonths: 0, spentUsd: 0 };

export class BillingStore {
  private readonly cursors;
  private readonly ledger;
  private readonly usage;
  private readonly state;
  private readonly credits;

  constructor(
    private readonly env: LmdbEnv,
    private readonly accounts: AccountStore,
  ) {
    this.cursors = env.db<MeterCursor>('meter_cursors');
    this.ledger = env.db<LedgerEntry>('ledger');
    this.usage = env.db<Usage>('account_usage');
    this.state = env.db<BillingState>('billing_state');
    this.credits = env.db<{ accountId: string; usd: number; at: number }>('credits_applied');
    this.outbox = env.db<OutboxEntry>('ledger_outbox');
  }

  private readonly outbox;

  cursor(serverId: string): MeterCursor | undefined {
    return this.cursors.get(serverId);
  }

  startMeter(serverId: string, at: number, egress: number): void {
    this.cursors.putSync(serverId, { at, egress });
  }

  stopMeter(serverId: string): void {
    this.cursors.removeSync(serverId);
  }

  usageOf(accountId: string): Usage {
    return this.usage.get(accountId) ?? ZERO_USAGE;
  }

  stateOf(accountId: string): BillingState {
    return this.state.get(accountId) ?? {};
  }

  setState(accountId: string, s: BillingState): void {
    this.state.putSync(accountId, s);
  }

  /**
   * Charges one period of one server, drawing on the grant first and then on the balance, and
   * moves the cursor — all in one transaction. Returns false when the cursor is no longer at
   * `expectFrom` (the period was already charged).
   */
  charge(e: Omit<LedgerEntry, 'kind' | 'usd'> & { serverId: string }, nextEgress: number, p: Prices, grant: (a: AccountRecord | undefined) => Grant): boolean {
    return this.env.txSync(() => {
      const cur = this.cursors.get(e.serverId);
      if (!cur || cur.at !== e.from || e.to <= e.from) return false;
      const used = this.usage.get(e.accountId) ?? ZERO_USAGE;
      const acc = this.accounts.get(e.accountId);
      const g = grant(acc);
      const usd = periodCost(e, used, g, p);
      this.ledger.putSync([e.accountId, e.to, e.serverId], { ...e, kind: 'usage', usd });
      this.usage.putSync(e.accountId, {
        ramGbHours: round9(used.ramGbHours + e.ramGbHours),
        egressGb: round9(used.egressGb + e.egressGb),
        diskGbMonths: round9(used.diskGbMonths + e.diskGbMonths),
        checkpointGbMonths: round9((used.checkpointGbMonths ?? 0) + (e.checkpointGbMonths ?? 0)),
        spentUsd: round9(used.spentUsd + usd),
      });
      if (acc && usd > 0) this.accounts.addBalance(e.accountId, -usd);
      this.cursors.putSync(e.serverId, { at: e.to, egress: nextEgress });
      return true;
    });
  }

  /**
   * Cluster mode: puts one period of one server into the outbox (the registry computes its
   * dollars when it is written there) and moves the cursor, in one transaction: a kill at any
   * point neither loses nor doubles a period. False when the cursor is no longer at `from`.
   */
  chargeToOutbox(e: Omit<LedgerEntry, 'kind' | 'usd'> & { serverId: string }, nextEgress: number, p: Prices, g: Grant): boolean {
    return this.env.txSync(() => {
      const cur = this.cursors.get(e.serverId);
      if (!cur || cur.at !== e.from || e.to <= e.from) return false;
      const { source: _, ...period } = e;
      this.outbox.putSync(['u', e.serverId, e.to], { ...period, kind: 'usage', grant: { ...g }, prices: { ...p } });
      this.cursors.putSync(e.serverId, { at: e.to, egress: nextEgress });
      return true;
    });
  }

  /** Cluster mode: a credit to write to the registry (once per source, there). */
  queueCredit(accountId: string, usd: number, source: string, at: number): void {
    this.outbox.putSync(['c', source], { kind: 'credit', accountId, usd, source, at });
  }

  /** The outbox's oldest entries, at most `limit`. */
  pending(limit: number): { key: OutboxKey; entry: OutboxEntry }[] {
    return [...this.outbox.getRange({ limit })].map(({ key, value }) => ({ key: key as OutboxKey, entry: value }));
  }

  /** Entries the registry committed. */
  sent(keys: readonly OutboxKey[]): void {
    this.env.txSync(() => {
      for (const k of keys) this.outbox.removeSync(k);
    });
  }

  /** Cluster mode: an account's balance and usage totals as the registry has them (this host's cache). */
  cache(accountId: string, m: Usage & { balanceUsd: number }): void {
    this.env.txSync(() => {
      const { balanceUsd, ...usage } = m;
      const elsewhere = this.usage.get(accountId)?.checkpointBytesElsewhere; // cached apart (below)
      this.usage.putSync(accountId, elsewhere ? { ...usage, checkpointBytesElsewhere: elsewhere } : usage);
      this.accounts.setBalance(accountId, balanceUsd);
    });
  }

  /** Cluster mode: the bytes the account's checkpoints hold on the other hosts, as the registry
   *  says now (kept beside the cached usage totals; absent when none). */
  cacheCheckpointsElsewhere(accountId: string, bytes: number): void {
    if ((this.usage.get(accountId)?.checkpointBytesElsewhere ?? 0) === bytes) return;
    this.env.txSync(() => {
      const { checkpointBytesElsewhere: _, ...usage } = this.usage.get(accountId) ?? ZERO_USAGE;
      this.usage.putSync(accountId, bytes > 0 ? { ...usage, checkpointBytesElsewhere: bytes } : usage);
    });
  }

  /** Adds credit once per source key; false when that source was already applied. */
  credit(accountId: string, usd: number, source: string, at: number): boolean {
    return this.env.txSync(() => {
      if (this.credits.get(source) !== undefined) return false;
      if (this.accounts.addBalance(accountId, usd) === undefined) return false;
      this.credits.putSync(source, { accountId, usd, at });
      this.ledger.putSync([accountId, at, source], { kind: 'credit', accountId, from: at, to: at, ramGbHours: 0, diskGbMonths: 0, egressGb: 0, usd, source });
      return true;
    });
  }

  /** Ledger entries of an account, newest first, after an optional cursor (exclusive). */
  entries(accountId: string, limit: number, before?: [number, string]): { items: LedgerEntry[]; next?: [number, string] } {
    const start = before ? [accountId, before[0], before[1]] : [accountId, Number.MAX_SAFE_INTEGER];
    const items: LedgerEntry[] = [];
    let last: [number, string] | undefined;
    for (const { key, value } of this.ledger.getRange({ start, end: [accountId], reverse: true, exclusiveStart: !!before } as never)) {
      const k = key as [string, number, string];
      if (k[0] !== accountId) break;
      items.push(value);
      last = [k[1], k[2]];
      if (items.length >= limit) break;
    }
    return { items, next: items.length >= limit ? last : undefined };
  }
}
