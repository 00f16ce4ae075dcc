// The limits of the hosting API as one atomic check-and-reserve each (issue 35 item 4), released
// when the work ends. Two implementations of each, chosen once at wiring:
//   - servers per account and per anonymous source address: on a single box, counted and
//     inserted in the store transaction that writes the pending server record (the record is the
//     reservation: servers.ts `take`); in cluster mode, first reserved in the registry
//     (registry/quotas.ts), which counts every host's placements and creates in flight;
//   - commands running per account: an in-process count on a single box (checked and taken in
//     one synchronous step; it dies with the process), the registry's reservation in cluster mode;
//   - request rates: the in-memory token buckets (src/ratelimit.ts) first, then in cluster mode
//     the registry's shared bucket for the same key, so the limit holds for every host together.
// SMS sends reserve their slot in the CodeBook (directory.ts) before the text goes out.

import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import { RateLimiter, type RateLimit, type Verdict } from '../ratelimit.js';
import type { AccountRecord, Store } from '../store/index.js';

/** How long a host counts request rates alone after the registry failed to answer. */
const ALONE_MS = 5_000;
/** How long tokens a host took from a shared bucket may be spent by it. */
const LEASE_MS = 5_000;

/** The registry's side (src/registry/quotas.ts), as hosting uses it. */
export interface SharedQuotas {
  reserveServer(c: {
    serverId: string;
    accountId: string;
    maxPerAccount: number;
    anonIp?: string;
    maxPerIp: number;
    ttlMs: number;
  }): Promise<'account' | 'ip' | undefined>;
  releaseServer(serverId: string): Promise<void>;
  reserveExec(accountId: string, execId: string, max: number, ttlMs: number): Promise<boolean>;
  releaseExec(execId: string): Promise<void>;
  /** At start: the reservations of this host's earlier run go (nothing of this run is in flight). */
  releaseOwn(): Promise<number>;
  /** Up to `want` tokens from the shared bucket: how many were taken; when none, the seconds until one is there. */
  take(key: string, burst: number, perSecond: number, want: number): Promise<{ granted: number; retryAfter: number }>;
  /** Tokens taken and not spent, back into the shared bucket (never above `burst`). */
  give(key: string, tokens: number, burst: number): Promise<void>;
}

/** The address whose anonymous cap a server of `account` counts under; undefined once verified. */
export const anonIpOf = (account: AccountRecord): string | undefined => (account.phone ? undefined : account.createdIp);

export const serverLimit = (max: number) => AppError.of('server_limit', `this account already holds ${max} servers; delete one first`);
export const ipLimit = (max: number, how = '{"phone": "+…"}') =>
  AppError.of('ip_limit', `anonymous accounts from this address already hold ${max} servers; verify a phone (${how}) to lift the limit`);

/** Single box: the servers of `account` and of anonymous accounts from its address, pending ones
 *  included; call inside the transaction that inserts (store.atomically) to make it a reservation. */
export function checkLocalServers(store: Store, account: AccountRecord, maxPerAccount: number, maxPerIp: number): void {
  if (store.servers.listByAccount(account.id, { withPending: true }).length >= maxPerAccount) throw serverLimit(maxPerAccount);
  const ip = anonIpOf(account);
  if (ip === undefined) return;
  let n = 0;
  for (const s of store.servers.all({ withPending: true })) {
    const a = store.accounts.get(s.accountId);
    if (a && !a.phone && a.createdIp === ip) n++;
  }
  if (n >= maxPerIp) throw ipLimit(maxPerIp);
}

/** A request-rate limit: this process's bucket, then (cluster mode) the registry's shared one
 *  under `name:key`. Tokens are taken from the shared bucket a tenth of the burst at a time and
 *  spent here within LEASE_MS (one round trip per few requests); what a lease did not spend goes
 *  back to the shared bucket when it lapses (the hosts together never pass the limit, and a
 *  client whose requests each find the lease lapsed is charged one token each, not a chunk). A
 *  registry that cannot be reached leaves this host's own bucket in charge for a while. */
export class SharedRateLimit {
  private readonly local: RateLimiter;
  private readonly chunk: number;
  /** Tokens taken from the shared bucket and not spent yet, per key, with when they lapse. */
  private readonly leased = new Map<string, { tokens: number; until: number }>();
  /** The round trip to the shared bucket under way, per key (concurrent requests share it). */
  private readonly inflight = new Map<string, Promise<{ granted: number; retryAfter: number } | 'alone'>>();
  private lastSweep = 0;
  /** After a failed read of the shared bucket, this host counts alone until then (no request
   *  waits on a registry that is away). */
  private aloneUntil = 0;

  constructor(
    private readonly name: string,
    private readonly limit: RateLimit,
    private readonly shared: SharedQuotas | undefined,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.local = new RateLimiter(limit, now);
    this.chunk = Math.max(1, Math.floor(limit.burst / 10));
  }

  /** The verdict; synchronous on a single box, when this host's own bucket already refuses, and
   *  when a token taken from the shared bucket before is left. */
  take(key: string): Verdict | Promise<Verdict> {
    const v = this.local.take(key);
    const t = this.now();
    if (!v.ok || !this.shared || t < this.aloneUntil) return v;
    this.sweep(t);
    if (this.spend(key, t)) return v;
    return this.viaShared(key, v);
  }

  /** One token of the lease taken for `key`, if one is left. */
  private spend(key: string, t: number): boolean {
    const lease = this.leased.get(key);
    if (!lease) return false;
    if (lease.until <= t) {
      this.lapse(key, lease.tokens);
      return false;
    }
    if (lease.tokens <= 0) return false;
    if (--lease.tokens === 0) this.leased.delete(key);
    return true;
  }

  /** A token from the shared bucket: requests that find no lease share one round trip for it (each
   *  taking its own chunk emptied the bucket: 16 concurrent creates took 16 chunks of a tenth of it). */
  private async viaShared(key: string, v: Verdict): Promise<Verdict> {
    for (;;) {
      const r = await this.fetch(key);
      if (r === 'alone') return v;
      if (this.spend(key, this.now())) return v;
      if (r.granted === 0) return { ok: false, retryAfter: r.retryAfter };
      // the chunk went to the others that waited on the same round trip: one more
    }
  }

  private fetch(key: string): Promise<{ granted: number; retryAfter: number } | 'alone'> {
    let p = this.inflight.get(key);
    if (p) return p;
    p = this.shared!.take(`${this.name}:${key}`, this.limit.burst, this.limit.perSecond, this.chunk)
      .then(
        (r) => {
          if (r.granted > 0) this.leased.set(key, { tokens: r.granted, until: this.now() + LEASE_MS });
          return r;
        },
        (e: unknown) => {
          this.aloneUntil = this.now() + ALONE_MS;
          if (!isAppError(e) || e.code !== 'registry_unavailable')
            this.log.warn('shared rate limit not read; this host counts alone for a while', { err: (e as Error).message });
          return 'alone' as const;
        },
      )
      .finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }

  private sweep(t: number): void {
    if (t - this.lastSweep < 60_000) return;
    this.lastSweep = t;
    for (const [k, l] of this.leased) if (l.until <= t) this.lapse(k, l.tokens);
  }

  /** A lapsed lease goes; its unspent tokens back to the shared bucket (lost if it cannot be reached). */
  private lapse(key: string, tokens: number): void {
    this.leased.delete(key);
    if (tokens > 0) this.shared?.give(`${this.name}:${key}`, tokens, this.limit.burst).catch(() => {});
  }
}
