// bin/rootbox admin commands, run in the CLI process: ask the daemon over the admin channel when
// it runs, otherwise act on the store directly (and say so).

import { randomUUID } from 'node:crypto';
import { adminCreditOffline } from '../billing/index.js';
import { AppError, isErrorCode } from '../errors.js';
import { callAdmin, type AdminAnswer } from './client.js';

const MiB = 1024 * 1024;

async function ask(dataDir: string, method: string, path: string, body?: unknown): Promise<AdminAnswer | undefined> {
  try {
    return await callAdmin(dataDir, method, path, body);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') throw AppError.of('admin_denied', 'the daemon\'s admin socket is root only; run this as root');
    throw e;
  }
}

function refused(a: AdminAnswer): never {
  throw AppError.of(isErrorCode(a.body.error) ? a.body.error : 'admin_failed', String(a.body.detail ?? `the daemon answered ${a.status}`));
}

/** `rootbox admin credit <account-or-server> <usd>`. */
export async function creditCommand(dataDir: string, target: string, usd: string): Promise<string> {
  const source = `admin:${randomUUID()}`;
  const a = await ask(dataDir, 'POST', '/credit', { target, usd, source });
  if (!a) return adminCreditOffline(dataDir, target, usd, source);
  if (a.status !== 200) refused(a);
  const b = a.body as { account: string; usd: number; balance_usd: number; tier: string; servers: { id: string; memory_bytes: number; disk_bytes: number; suspended: boolean }[] };
  const servers = b.servers.map((s) => `  ${s.id}: ${Math.round(s.memory_bytes / MiB)} MiB RAM, ${Math.round(s.disk_bytes / MiB)} MiB disk${s.suspended ? ', suspended' : ''}`);
  return [`credited $${b.usd} to ${b.account}; balance now $${b.balance_usd}; tier ${b.tier}`, ...(servers.length ? ['ceilings now:', ...servers] : [])].join('\n');
}
