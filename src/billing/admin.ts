// `rootbox admin credit <account-or-server> <usd>`: credits an account from the host. It writes
// to the same LMDB environment as the running daemon (LMDB allows several processes); the
// daemon's next billing pass resumes suspended servers.

import { randomUUID } from 'node:crypto';
import { AppError } from '../errors.js';
import { openStore } from '../store/index.js';

export async function adminCredit(dataDir: string, target: string, usdRaw: string): Promise<string> {
  const usd = Number(usdRaw);
  if (!Number.isFinite(usd) || usd <= 0 || usd > 1_000_000) throw new AppError('bad_request', 'invalid_amount', `usd must be a positive number, got ${usdRaw}`);
  const store = openStore(dataDir);
  try {
    const accountId = target.startsWith('srv_') ? store.servers.get(target)?.accountId : target;
    if (!accountId || !store.accounts.get(accountId)) throw new AppError('not_found', 'unknown_target', `no account or server ${target}`);
    store.billing.credit(accountId, Math.round(usd * 1e6) / 1e6, `admin:${randomUUID()}`, Date.now());
    return `credited $${usd} to ${accountId}; balance now $${store.accounts.get(accountId)!.balanceUsd}`;
  } finally {
    await store.close();
  }
}
