// Credits and the running-out rules: what is left of the free grant, the balance, the tier;
// when an account is exhausted (a grant part used up and no positive balance) and the upgrade
// envelope of spec part 2 that read endpoints answer with then.

import { AppError } from '../errors.js';
import type { AccountRecord, Grant, Store } from '../store/index.js';
import { storedCheckpointBytes } from './stored.js';

export interface Credits {
  tier: 'anonymous' | 'verified' | 'paid';
  ram_gb_hours_left: number;
  egress_gb_left: number;
  balance_usd: number;
  /** Bytes the account's checkpoints hold in the store now, on every host (billed per GB-month like disk). */
  checkpoint_bytes: number;
}

const r = (n: number, d = 6) => Math.round(n * 10 ** d) / 10 ** d;

export function creditsOf(store: Store, grantOf: (a: AccountRecord) => Grant, account: AccountRecord): Credits {
  const fresh = store.accounts.get(account.id) ?? account;
  const used = store.billing.usageOf(account.id);
  const grant = grantOf(fresh);
  return {
    tier: fresh.balanceUsd > 0 ? 'paid' : fresh.phone ? 'verified' : 'anonymous',
    ram_gb_hours_left: r(Math.max(0, grant.ramGbHours - used.ramGbHours)),
    egress_gb_left: r(Math.max(0, grant.egressGb - used.egressGb)),
    balance_usd: r(fresh.balanceUsd, 4),
    // this host's servers as they are now, the other hosts' as the registry said last (cluster mode)
    checkpoint_bytes:
      store.servers.listByAccount(account.id).reduce((n, s) => n + storedCheckpointBytes(store, s.id), 0) + (used.checkpointBytesElsewhere ?? 0),
  };
}

export function isExhausted(c: Credits): boolean {
  return (c.ram_gb_hours_left <= 0 || c.egress_gb_left <= 0) && c.balance_usd <= 0;
}

/** Where an exhausted account stands, for the envelope's message. */
export interface EnvelopeFacts {
  /** Billing's clock: now, as of its latest pass. */
  now: number;
  /** When its servers are paused: first seen exhausted + suspendAfter (undefined: not seen by a pass yet). */
  pausesAt?: number;
  suspendAfterMs: number;
  /** Its servers are paused already. */
  paused: boolean;
  /** Its phone is verified (verifying one is no way out then). */
  verified: boolean;
}

/** "48h", "3h", "25 min": a time left, rounded to hours from one hour on. */
function timeLeft(ms: number): string {
  return ms >= 3_600_000 ? `${Math.round(ms / 3_600_000)}h` : `${Math.max(1, Math.ceil(ms / 60_000))} min`;
}

export function upgradeEnvelope(baseUrl: string, f: EnvelopeFacts) {
  const recharge = `${baseUrl}/account/recharge`;
  const ways = `add credit (POST ${recharge})${f.verified ? '' : ' or verify a phone'}`;
  const left = (f.pausesAt ?? f.now + f.suspendAfterMs) - f.now;
  const what = f.paused
    ? `Your servers are paused; ${ways} to start them again.`
    : left > 0
      ? `Your servers will be paused in ${timeLeft(left)} unless you ${ways}.`
      : `Your servers will be paused within a minute unless you ${ways}.`;
  return {
    upgrade_required: true as const,
    reason: 'free_tier_exceeded' as const,
    upgrade_url: recharge,
    message: `Your free grant is used up and your balance is empty. ${what}`,
  };
}

/** The 402 a read endpoint answers with while the account is exhausted; `more` adds what the
 *  endpoint would have answered (e.g. the server and its `suspended` flag) beside the envelope. */
export function envelopeError(baseUrl: string, facts: EnvelopeFacts, more: Record<string, unknown> = {}): AppError {
  const env = upgradeEnvelope(baseUrl, facts);
  return AppError.of('free_tier_exceeded', env.message, { extra: { ...more, ...env } });
}
