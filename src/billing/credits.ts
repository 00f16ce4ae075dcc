// Credits and the running-out rules: what is left of the free grant, the balance, the tier;
// when an account is exhausted (a grant part used up and no positive balance) and the upgrade
// envelope of spec part 2 that read endpoints answer with then.

import { AppError } from '../errors.js';
import type { AccountRecord, Grant, Store } from '../store/index.js';

export interface Credits {
  tier: 'anonymous' | 'verified' | 'paid';
  ram_gb_hours_left: number;
  egress_gb_left: number;
  balance_usd: number;
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
  };
}

export function isExhausted(c: Credits): boolean {
  return (c.ram_gb_hours_left <= 0 || c.egress_gb_left <= 0) && c.balance_usd <= 0;
}

export function upgradeEnvelope(baseUrl: string, suspendAfterMs: number) {
  const hours = Math.round(suspendAfterMs / 3_600_000);
  return {
    upgrade_required: true as const,
    reason: 'free_tier_exceeded' as const,
    upgrade_url: `${baseUrl}/account/recharge`,
    message: `Your free grant is used up and your balance is empty. Your servers will be paused in ${hours}h unless you add credit (POST ${baseUrl}/account/recharge) or verify a phone.`,
  };
}

/** The 402 a read endpoint answers with while the account is exhausted; `more` adds what the
 *  endpoint would have answered (e.g. the server and its `suspended` flag) beside the envelope. */
export function envelopeError(baseUrl: string, suspendAfterMs: number, more: Record<string, unknown> = {}): AppError {
  const env = upgradeEnvelope(baseUrl, suspendAfterMs);
  return AppError.of('free_tier_exceeded', env.message, { extra: { ...more, ...env } });
}
