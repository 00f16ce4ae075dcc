// Where money lives, behind one interface billing uses (MoneyBook): on a single box this host's
// LMDB (LocalBook: a period's charge, the grant split and the balance in one transaction, as
// always); in cluster mode the registry's ledger (RegistryBook). There a period goes into an LMDB
// outbox in the transaction that moves the server's cursor, and the flusher writes the outbox to
// the registry in batches, removing entries only after the registry committed them (a retry after
// a lost reply is refused by the entry's key there). A registry that is down lets the outbox grow
// (said once in the log) and it is flushed when it is back. Balances and usage totals in LMDB
// become a cache refreshed from the registry after each flush and credit and at every pass for
// the accounts this host holds servers of, so the synchronous readers (tier, envelope,
// enforcement) keep working.

import { isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { AccountRecord, Grant, LedgerEntry, OutboxEntry, Prices, Store } from '../store/index.js';
import { storedCheckpointBytes } from './stored.js';

/** A metered period of one server (store/billing.ts). */
export type Period = Omit<LedgerEntry, 'kind' | 'usd'> & { serverId: string };

/** An account's money as the registry has it. */
export interface SharedMoney {
  balanceUsd: number;
  ramGbHours: number;
  egressGb: number;
  diskGbMonths: number;
  checkpointGbMonths: number;
  spentUsd: number;
}

/** A server's stored checkpoint bytes as this host reports them to the registry. */
export interface ServerCheckpointBytes {
  serverId: string;
  accountId: string;
  bytes: number;
}

/** The registry's ledger (registry/ledger.ts), as billing needs it. */
export interface SharedLedger {
  write(batch: readonly OutboxEntry[]): Promise<{ applied: Set<string>; totals: Map<string, SharedMoney> }>;
  totals(ids: readonly string[]): Promise<Map<string, SharedMoney>>;
  ready(): Promise<void>;
  entries(accountId: string, limit: number, before?: [number, string]): Promise<{ items: LedgerEntry[]; next?: [number, string] }>;
  /** Records this host's servers' stored checkpoint bytes (`all`: every one of them). */
  reportCheckpoints(rows: readonly ServerCheckpointBytes[], all: boolean): Promise<void>;
  /** Bytes the checkpoints of these accounts hold now on the other hosts. */
  checkpointsElsewhere(ids: readonly string[]): Promise<Map<string, number>>;
}

export interface MoneyBook {
  /** Charges one period and moves the cursor, exactly once; false when it was charged before. */
  charge(e: Period, nextEgress: number, grant: (a: AccountRecord | undefined) => Grant): boolean;
  /** Adds credit once per source; false when that source was applied before (or, single box, the account is unknown). */
  credit(accountId: string, usd: number, source: string, at: number): Promise<boolean>;
  /** Throws registry_unavailable when a credit could not be written now (asked before a payment settles). */
  ready(): Promise<void>;
  /** Sends what waits and refreshes the cached balances of `accounts` (a pass). */
  sync(accounts: readonly string[]): Promise<void>;
  /** Re-reads one account's balance and usage totals into the cache (cluster mode: the registry's,
   *  which hosts metering it elsewhere change); the cache as it is when the registry is away. */
  refresh(accountId: string): Promise<void>;
  entries(accountId: string, limit: number, before?: [number, string]): Promise<{ items: LedgerEntry[]; next?: [number, string] }>;
  /** Cluster mode: this host's servers' checkpoint bytes written to the registry (other hosts'
   *  /credits count them); a single box has nothing to tell. */
  reportCheckpoints(rows: readonly ServerCheckpointBytes[], all: boolean): Promise<void>;
}

export class LocalBook implements MoneyBook {
  constructor(
    private readonly store: Store,
    private readonly prices: Prices,
  ) {}
  charge(e: Period, nextEgress: number, grant: (a: AccountRecord | undefined) => Grant): boolean {
    return this.store.billing.charge(e, nextEgress, this.prices, grant);
  }
  async credit(accountId: string, usd: number, source: string, at: number): Promise<boolean> {
    return this.store.billing.credit(accountId, usd, source, at);
  }
  async ready(): Promise<void> {}
  async sync(): Promise<void> {}
  async refresh(): Promise<void> {}
  async reportCheckpoints(): Promise<void> {}
  async entries(accountId: string, limit: number, before?: [number, string]) {
    return this.store.billing.entries(accountId, limit, before);
  }
}

/** Entries sent to the registry in one transaction at most. */
const BATCH = 200;

export class RegistryBook implements MoneyBook {
  private down = false;
  private flushing?: Promise<Set<string>>;
  /** Credit sources a flush wrote for the first time, until credit() asks. */
  private readonly creditsApplied = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly prices: Prices,
    private readonly shared: SharedLedger,
    private readonly log: Logger,
  ) {}

  charge(e: Period, nextEgress: number, grant: (a: AccountRecord | undefined) => Grant): boolean {
    return this.store.billing.chargeToOutbox(e, nextEgress, this.prices, grant(this.store.accounts.get(e.accountId)));
  }

  /** The credit is queued durably first, then flushed: once queued it is written exactly once,
   *  now or by a later flush (a settled payment is never lost to a registry that just went down). */
  async credit(accountId: string, usd: number, source: string, at: number): Promise<boolean> {
    this.store.billing.queueCredit(accountId, usd, source, at);
    await this.flush();
    // whichever flush wrote it (a pass's may have taken it first) noted whether it was new
    return this.creditsApplied.delete(source);
  }

  ready(): Promise<void> {
    return this.shared.ready();
  }

  async sync(accounts: readonly string[]): Promise<void> {
    await this.flush().catch(() => undefined);
    try {
      const rows = this.store.servers.all().map((s) => ({ serverId: s.id, accountId: s.accountId, bytes: storedCheckpointBytes(this.store, s.id) }));
      await this.shared.reportCheckpoints(rows, true);
      const totals = await this.shared.totals(accounts);
      // an account the registry has no money of yet keeps what this host has
      for (const [id, m] of totals) this.cache(id, m);
      for (const [id, n] of await this.shared.checkpointsElsewhere(accounts)) this.store.billing.cacheCheckpointsElsewhere(id, n);
    } catch (e) {
      this.unavailable(e);
    }
  }

  async refresh(accountId: string): Promise<void> {
    try {
      for (const [id, m] of await this.shared.totals([accountId])) this.cache(id, m);
      for (const [id, n] of await this.shared.checkpointsElsewhere([accountId])) this.store.billing.cacheCheckpointsElsewhere(id, n);
    } catch (e) {
      if (!isAppError(e) || e.code !== 'registry_unavailable') throw e; // away: the cache answers
    }
  }

  entries(accountId: string, limit: number, before?: [number, string]) {
    return this.shared.entries(accountId, limit, before);
  }

  reportCheckpoints(rows: readonly ServerCheckpointBytes[], all: boolean): Promise<void> {
    return this.shared.reportCheckpoints(rows, all);
  }

  /** Writes the outbox to the registry, batch by batch; answers the keys newly applied. One flush
   *  at a time (a second caller waits for it, then flushes what is left). Registry trouble is
   *  logged once and thrown; what was not committed stays in the outbox. */
  async flush(): Promise<Set<string>> {
    while (this.flushing) await this.flushing.catch(() => undefined);
    const mine = this.drain();
    this.flushing = mine;
    try {
      return await mine;
    } finally {
      if (this.flushing === mine) this.flushing = undefined;
    }
  }

  private async drain(): Promise<Set<string>> {
    const applied = new Set<string>();
    for (;;) {
      const batch = this.store.billing.pending(BATCH);
      if (batch.length === 0) return applied;
      let out;
      try {
        out = await this.shared.write(batch.map((b) => b.entry));
      } catch (e) {
        this.unavailable(e);
        throw e;
      }
      this.store.billing.sent(batch.map((b) => b.key));
      for (const k of out.applied) applied.add(k);
      if (this.creditsApplied.size > 10_000) this.creditsApplied.clear(); // sources nobody asked about (reconciler, offline)
      for (const b of batch) if (b.entry.kind === 'credit' && out.applied.has(b.entry.source)) this.creditsApplied.add(b.entry.source);
      for (const [id, m] of out.totals) this.cache(id, m);
      if (this.down) this.log.info('registry reachable again; metering outbox written', { applied: applied.size });
      this.down = false;
    }
  }

  private cache(id: string, m: SharedMoney): void {
    this.store.billing.cache(id, m);
  }

  private unavailable(e: unknown): void {
    if (!isAppError(e) || e.code !== 'registry_unavailable') {
      this.log.error('writing the ledger to the registry failed', { err: (e as Error).message });
      return;
    }
    if (!this.down) this.log.warn('registry unreachable: metering goes on into the outbox', { waiting: this.store.billing.pending(BATCH).length });
    this.down = true;
  }
}
