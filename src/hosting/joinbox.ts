// What a box has that a cluster shares, read from its store for the join (registry/join.ts's
// BoxRecords, wired by main.ts and `rootbox cluster join`): accounts with their ledgers, custom
// domains, certificates, committed servers, x402 payments used, the api keys sealed again under the cluster secret,
// and the store's mark that the join is done.

import type { LedgerEntry, Store } from '../store/index.js';
import { resealForCluster } from './keys.js';

/** Every ledger entry of an account, oldest first. */
function ledgerOf(store: Store, accountId: string): LedgerEntry[] {
  const out: LedgerEntry[] = [];
  let before: [number, string] | undefined;
  for (;;) {
    const page = store.billing.entries(accountId, 1000, before);
    out.push(...page.items);
    if (!page.next) return out.reverse();
    before = page.next;
  }
}

export function boxRecords(store: Store, dataDir: string) {
  return {
    accounts: () => store.accounts.all().map(({ balanceUsd: _, ...a }) => a),
    ledger: (accountId: string) => ledgerOf(store, accountId),
    domains: () => store.domains.all().map((d) => ({ domain: d.domain, serverId: d.serverId, accountId: d.accountId, state: d.state })),
    certificates: () => store.certificates.all(),
    servers: () => store.servers.all().map((s) => ({ id: s.id, slug: s.slug, accountId: s.accountId })),
    payments: () => store.payments.keys(),
    reseal: (keyEnc: string, clusterSecret: Buffer) => resealForCluster(dataDir, keyEnc, clusterSecret),
    joined: () => store.joined.get(),
    markJoined: (m: { registry: string; host: string; at: number }) => store.joined.mark(m),
  };
}
