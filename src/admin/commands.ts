// `rootbox accounts credit <account-or-server> <usd>` (also `rootbox admin credit`): through the
// daemon when it runs (Billing.credit: the new tier's ceilings apply to running servers at once);
// otherwise written to the store directly, which the daemon applies when it starts — refused
// while another process holds the store.

import { randomUUID } from 'node:crypto';
import { adminCreditOffline } from '../billing/index.js';
import { ask, assertStoreFree, ok } from './cli-link.js';

const MiB = 1024 * 1024;

interface Credited {
  account: string;
  usd: number;
  balance_usd: number;
  tier: string;
  servers: { id: string; memory_bytes: number; disk_bytes: number; suspended: boolean }[];
}

export async function creditCommand(dataDir: string, target: string, usd: string, registry = false): Promise<string> {
  const source = `admin:${randomUUID()}`;
  const a = await ask(dataDir, 'POST', '/credit', { target, usd, source });
  if (!a) {
    assertStoreFree(dataDir, 'accounts credit');
    return adminCreditOffline(dataDir, target, usd, source, registry);
  }
  const b = ok<Credited>(a);
  const servers = b.servers.map(
    (s) => `  ${s.id}: ${Math.round(s.memory_bytes / MiB)} MiB RAM, ${Math.round(s.disk_bytes / MiB)} MiB disk${s.suspended ? ', suspended' : ''}`,
  );
  return [`credited $${b.usd} to ${b.account}; balance now $${b.balance_usd}; tier ${b.tier}`, ...(servers.length ? ['ceilings now:', ...servers] : [])].join(
    '\n',
  );
}
