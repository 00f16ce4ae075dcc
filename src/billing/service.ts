// Billing as the daemon runs it: the metering pass (meter, outbox to the registry in cluster mode,
// enforcement, tier ceilings), credit and x402 recharge, and the account's grant. index.ts is the
// module's surface; this file is its implementation.

import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Paywall, SettledListener } from '../payments/index.js';
import { usdToAtomic } from '../payments/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import type { AccountRecord, Grant, Store } from '../store/index.js';
import { creditsOf, envelopeError, isExhausted, type Credits } from './credits.js';
import type { EgressSink } from './egress.js';
import { enforce } from './enforce.js';
import { LocalBook, RegistryBook, type MoneyBook, type SharedLedger } from './book.js';
import { Meter, runtimeUsage, type UsageSource } from './meter.js';
import { storedCheckpointBytes } from './stored.js';
import { usagePage } from './usage.js';

export interface BillingConfig {
  ramUsdPerGbHour: number;
  diskUsdPerGbMonth: number;
  egressUsdPerGb: number;
  /** Checkpoint storage per GB-month (absent: free; the config always sets it). */
  checkpointUsdPerGbMonth?: number;
  grantRamGbHours: number;
  grantEgressGb: number;
  verifiedGrantRamGbHours: number;
  verifiedGrantEgressGb: number;
  meterInterval: number;
  suspendAfter: number;
  maxRechargeUsd: number;
}

export interface BillingDeps {
  cfg: BillingConfig;
  store: Store;
  runtime: Pick<Runtime, 'stop' | 'start'>;
  usage: UsageSource;
  log: Logger;
  /** The payments reconciler: recharges it settles later are credited (onSettled). */
  settlements?: { onSettled(fn: SettledListener): void };
  /** Cluster mode: the registry's ledger; balances and usage totals live there (book.ts). */
  ledger?: SharedLedger;
  /** Cluster mode: false for a server the registry places on another host (never metered here). */
  owns?: (serverId: string) => boolean;
  now?: () => number;
}

/** Keeps servers' ceilings in line with their account's tier (hosting registers it). */
export interface TierKeeper {
  /** Called after credit or a tier change, to raise the ceilings of running servers live. */
  apply(account: AccountRecord): Promise<void>;
  /** Called after each pass: brings servers whose ceilings lag behind their account's tier up
   *  to it (a credit written while the daemon could not be told, e.g. by `rootbox admin credit`). */
  sync(): Promise<unknown>;
}

export class Billing {
  readonly meter: Meter;
  /** Where money lives: this host's store, or the registry through the outbox. */
  readonly book: MoneyBook;
  /** Where the daemon reports bytes it sent for a server (proxy answers, exposed ports). */
  readonly egress: EgressSink = (id, bytes) => this.meter.addEgress(id, bytes);
  private tiers?: TierKeeper;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private readonly now: () => number;
  /** The clock of the latest pass (tests drive passes with a clock of their own). */
  private lastPass?: number;

  constructor(private readonly d: BillingDeps) {
    this.now = d.now ?? Date.now;
    const { ramUsdPerGbHour, diskUsdPerGbMonth, egressUsdPerGb, checkpointUsdPerGbMonth = 0 } = d.cfg;
    const prices = { ramUsdPerGbHour, diskUsdPerGbMonth, egressUsdPerGb, checkpointUsdPerGbMonth };
    this.book = d.ledger ? new RegistryBook(d.store, prices, d.ledger, d.log) : new LocalBook(d.store, prices);
    this.meter = new Meter(d.store, d.usage, this.book, (a) => this.grantOf(a), d.log, d.owns);
    d.settlements?.onSettled((rec) => void this.onSettled(rec).catch((e) => d.log.error('crediting a settled recharge failed', { err: e })));
  }

  /** Registers the one keeper of tier ceilings (hosting, when it is built). */
  keepTiers(keeper: TierKeeper): void {
    this.tiers = keeper;
  }

  grantOf(a: AccountRecord | undefined): Grant {
    return a?.phone
      ? { ramGbHours: this.d.cfg.verifiedGrantRamGbHours, egressGb: this.d.cfg.verifiedGrantEgressGb }
      : { ramGbHours: this.d.cfg.grantRamGbHours, egressGb: this.d.cfg.grantEgressGb };
  }

  /** A server's checkpoints changed (taken, deleted, its server gone): cluster mode, its stored
   *  bytes are written to the registry now, so other hosts' /credits count them before this
   *  host's next pass (which writes every server's again). */
  checkpointsChanged(serverId: string, accountId: string): void {
    const bytes = storedCheckpointBytes(this.d.store, serverId);
    void this.book
      .reportCheckpoints([{ serverId, accountId, bytes }], false)
      .catch((e) => this.d.log.warn('checkpoint bytes not written to the registry; the next pass writes them', { err: (e as Error).message }));
  }

  /** A move of the server off this host begins (moves/source.ts): its period is charged up to now
   *  and it is metered here no more while the move runs. Answers that instant, from which the
   *  target meters it (takeOver). */
  async handOff(serverId: string): Promise<number> {
    const at = this.now();
    const server = this.d.store.servers.get(serverId);
    if (server) await this.meter.handOff(server, at);
    return at;
  }

  /** The move ended: moved, this host meters the server no more; failed, it is metered here again from the hand-off. */
  handedOff(serverId: string, moved: boolean): void {
    this.meter.handedOff(serverId, moved);
  }

  /** A server moved here (from the instant its source charged it up to) or recovered here (from now). */
  takeOver(serverId: string, from?: number): void {
    this.meter.takeOver(serverId, this.now(), from);
  }

  credits(a: AccountRecord): Credits {
    return creditsOf(this.d.store, (x) => this.grantOf(x), a);
  }

  /** Throws the 402 upgrade envelope when the account has run out (read endpoints, POST
   *  /create); `more` is answered beside the envelope (see envelopeError). */
  assertNotExhausted(a: AccountRecord, baseUrl: string, more?: Record<string, unknown>): void {
    if (!isExhausted(this.credits(a))) return;
    const state = this.d.store.billing.stateOf(a.id);
    const suspendAfterMs = this.d.cfg.suspendAfter;
    const facts = {
      now: this.lastPass ?? this.now(),
      pausesAt: state.exhaustedAt === undefined ? undefined : state.exhaustedAt + suspendAfterMs,
      suspendAfterMs,
      paused: state.suspended === true,
      verified: Boolean((this.d.store.accounts.get(a.id) ?? a).phone),
    };
    throw envelopeError(baseUrl, facts, more);
  }

  private enforce(now: number): Promise<void> {
    return enforce(
      { store: this.d.store, runtime: this.d.runtime, credits: (a) => this.credits(a), suspendAfterMs: this.d.cfg.suspendAfter, log: this.d.log },
      now,
    );
  }

  /** The accounts this host holds servers of (their cached balances are refreshed every pass). */
  private heldAccounts(): string[] {
    return [...new Set(this.d.store.servers.all().map((s) => s.accountId))];
  }

  /** One metering and enforcement pass at `now` (tests call it with a controlled clock). */
  async tick(now = this.now()): Promise<void> {
    this.lastPass = Math.max(this.lastPass ?? now, now);
    await this.meter.tick(now, this.d.cfg.meterInterval);
    // cluster mode: the outbox to the registry, and the balances of this host's accounts back
    await this.book.sync(this.heldAccounts());
    await this.enforce(now);
    await this.tiers?.sync().catch((e) => this.d.log.warn('applying tier ceilings failed', { err: (e as Error).message }));
  }

  start(): void {
    // cluster mode: the time this host was down is not charged (its servers were unavailable)
    if (this.d.ledger) {
      const resumed = this.meter.resume(this.now());
      if (resumed) this.d.log.info('metering resumed from now: the time this host was down is not charged', { servers: resumed });
    }
    // cluster mode: what waits in the outbox (a restart while the registry was down, an offline
    // credit) is written now, not a pass later; the cached balances come back with it
    this.running = this.book
      .sync(this.heldAccounts())
      .catch((e) => this.d.log.warn('writing the ledger outbox failed; the next pass retries', { err: (e as Error).message }))
      .finally(() => (this.running = undefined));
    this.timer = setInterval(
      () => {
        if (this.running) return;
        this.running = this.tick()
          .catch((e) => this.d.log.error('billing pass failed', { err: e }))
          .finally(() => (this.running = undefined));
      },
      Math.min(this.d.cfg.meterInterval, 60_000),
    );
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
    // cluster mode: the period up to the stop is charged now, into the outbox (written at the next
    // start), since the next start opens every period at its own time (Meter.resume)
    if (this.d.ledger && this.timer)
      await this.meter.tick(this.now(), 0).catch((e) => this.d.log.warn('the last metering pass before the stop failed', { err: (e as Error).message }));
  }

  /** Adds credit once per source; resumes suspended servers and raises ceilings. Cluster mode:
   *  written to the registry (registry_unavailable when it cannot be reached: the credit then
   *  waits in the outbox and is written once when it is back). */
  async credit(accountId: string, usd: number, source: string): Promise<boolean> {
    const applied = await this.book.credit(accountId, usd, source, this.now());
    if (!applied) return false;
    const account = this.d.store.accounts.get(accountId);
    if (!account) return true; // cluster mode: an account this host does not hold
    this.d.log.info('credit added', { account: accountId, usd, source });
    // The credit is committed; ceilings that cannot be raised now are raised by the next pass.
    await this.tiers
      ?.apply(account)
      .catch((e) => this.d.log.warn('raising ceilings after credit failed; the next pass retries', { account: accountId, err: (e as Error).message }));
    await this.enforce(this.now());
    return true;
  }

  /** POST /account/recharge: x402 payment for exactly `usd`, credited once per payment. */
  async recharge(paywall: Paywall, account: AccountRecord, usdRaw: unknown, headers: Record<string, string | string[] | undefined>, url: string) {
    if (typeof usdRaw !== 'number' || !Number.isFinite(usdRaw) || usdRaw < 0.01 || usdRaw > this.d.cfg.maxRechargeUsd) {
      throw AppError.of('invalid_request', `usd: must be a number from 0.01 to ${this.d.cfg.maxRechargeUsd}`);
    }
    const amount = usdToAtomic(usdRaw.toFixed(6).replace(/0+$/, '').replace(/\.$/, ''));
    if (amount === null || Math.abs(Number(amount) / 1e6 - usdRaw) > 1e-9) throw AppError.of('invalid_request', 'usd: at most 6 decimal places');
    const paid = await paywall.charge(
      {
        headers,
        amount,
        resource: { url, description: `rootbox credit: $${usdRaw} for account ${account.id}`, mimeType: 'application/json' },
        purpose: 'recharge',
        meta: { account: account.id, usd: String(usdRaw) },
      },
      // the payment is settled only once the credit can be written (cluster mode: the registry answers)
      () => this.book.ready().then(() => true),
    );
    const source = `x402:${paid.payment.payer.toLowerCase()}:${paid.payment.nonce.toLowerCase()}`;
    if (paid.settlement.status === 'settled')
      await this.credit(account.id, usdRaw, source).catch((e) => {
        // settled: the credit waits in the outbox and is written once the registry is back
        if (!isAppError(e) || e.code !== 'registry_unavailable') throw e;
        this.d.log.warn('registry lost after settlement; the credit is queued', { account: account.id, source });
      });
    const fresh = this.d.store.accounts.get(account.id)!;
    return {
      headers: paid.headers,
      body: {
        ok: true,
        credited_usd: paid.settlement.status === 'settled' ? usdRaw : 0,
        settlement: paid.settlement.status,
        detail:
          paid.settlement.status === 'settled'
            ? `added $${usdRaw} to your balance`
            : 'the payment is being settled; the credit is added as soon as it confirms',
        credits: this.credits(fresh),
      },
    };
  }

  /** Credits a payment the reconciler settled later (purpose `recharge`). */
  async onSettled(rec: { purpose: string; payer: string; nonce: string; meta?: Record<string, string> }): Promise<void> {
    if (rec.purpose !== 'recharge' || !rec.meta?.account || !rec.meta.usd) return;
    const source = `x402:${rec.payer.toLowerCase()}:${rec.nonce.toLowerCase()}`;
    await this.credit(rec.meta.account, Number(rec.meta.usd), source).catch((e) => {
      if (!isAppError(e) || e.code !== 'registry_unavailable') throw e;
      this.d.log.warn('registry unreachable; the settled recharge is queued and credited once it is back', { account: rec.meta!.account, source });
    });
  }

  /** GET /usage: a page of the account's ledger, newest first. */
  usage(account: AccountRecord, limitRaw: string | null, cursor: string | null) {
    return usagePage(this.book, account, limitRaw, cursor);
  }
}

/** The daemon's billing part (main.ts): built over the runtime and the idle tracker (usage), settled recharges credited; metering starts later (start()). */
export function createBilling(d: {
  cfg: { billing: BillingConfig };
  store: Store;
  runtime: Pick<Runtime, 'stop' | 'start' | 'get' | 'stats' | 'frozen'>;
  presence: { state(id: string): ServerState | undefined };
  payments: { reconciler: NonNullable<BillingDeps['settlements']> };
  /** Cluster mode: the registry, whose ledger holds the money, and the placement cache (a server
   *  placed on another host is that host's to meter). */
  registry?: { ledger: SharedLedger; host: string; placements: { byServer(id: string): { host: string } | undefined } };
  log: Logger;
}): Billing {
  const usage = runtimeUsage(d.runtime, d.presence);
  const r = d.registry;
  return new Billing({
    cfg: d.cfg.billing,
    store: d.store,
    runtime: d.runtime,
    usage,
    settlements: d.payments.reconciler,
    ledger: r?.ledger,
    owns: r && ((id) => (r.placements.byServer(id)?.host ?? r.host) === r.host),
    log: d.log.child({ part: 'billing' }),
  });
}
