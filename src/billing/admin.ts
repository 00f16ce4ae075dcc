// Host-side credit (`rootbox admin credit <account-or-server> <usd>`): what the target and the
// amount mean, and the offline path. While the daemon runs, the CLI asks it over the admin
// channel (src/admin/), so the credit goes through Billing.credit and the new tier's ceilings
// are applied to running servers at once. Without a running daemon the credit is written to the
// store directly; the daemon applies stored tiers when it starts (and after each billing pass).

import { AppError } from '../errors.js';
import { openStore, type Store } from '../store/index.js';

export interface CreditRequest {
  accountId: string;
  usd: number;
}

/** A credit source the CLI makes up once per invocation, so a repeated request credits once. */
export const ADMIN_SOURCE_RE = /^admin:[0-9a-f-]{36}$/;

/** Checks the amount and resolves an account id or one of its server ids to the account. */
export function resolveCredit(store: Store, target: string, usdRaw: string): CreditRequest {
  const usd = /^\s*\d+(\.\d+)?\s*$/.test(usdRaw) ? Number(usdRaw) : NaN;
  if (!Number.isFinite(usd) || usd <= 0 || usd > 1_000_000)
    throw AppError.of('invalid_amount', `usd must be a positive number up to 1000000, got ${usdRaw.slice(0, 40)}`);
  const accountId = target.startsWith('srv_') ? store.servers.get(target)?.accountId : target;
  if (!accountId || !store.accounts.get(accountId)) throw AppError.of('unknown_target', `no account or server ${target.slice(0, 80)}`);
  return { accountId, usd: Math.round(usd * 1e6) / 1e6 };
}

/** Credits straight into the store (no daemon running on this data dir). Cluster mode
 *  (`registry`): the credit waits in the store's ledger outbox and the daemon writes it to the
 *  registry, once, when it starts (a balance written here would be overwritten by the registry's). */
export async function adminCreditOffline(dataDir: string, target: string, usdRaw: string, source: string, registry = false): Promise<string> {
  const store = openStore(dataDir);
  try {
    const { accountId, usd } = resolveCredit(store, target, usdRaw);
    if (registry) {
      store.billing.queueCredit(accountId, usd, source, Date.now());
      return `queued a credit of $${usd} to ${accountId}. The daemon is not running: it writes the credit to the cluster registry (once) and applies the tier's ceilings when it starts.`;
    }
    store.billing.credit(accountId, usd, source, Date.now());
    return `credited $${usd} to ${accountId}; balance now $${store.accounts.get(accountId)!.balanceUsd}. The daemon is not running: it applies the tier's ceilings when it starts.`;
  } finally {
    await store.close();
  }
}
