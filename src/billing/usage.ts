// GET /usage: one page of an account's ledger (newest first) from the book, with an opaque cursor
// for the next page.

import { AppError } from '../errors.js';
import type { AccountRecord } from '../store/index.js';
import type { MoneyBook } from './book.js';

export async function usagePage(book: MoneyBook, account: AccountRecord, limitRaw: string | null, cursor: string | null) {
  const limit = Math.min(Math.max(Number(limitRaw ?? 50) || 50, 1), 500);
  let before: [number, string] | undefined;
  if (cursor) {
    try {
      const v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
      if (Array.isArray(v) && typeof v[0] === 'number' && typeof v[1] === 'string') before = [v[0], v[1]];
    } catch {
      /* fall through */
    }
    if (!before) throw AppError.of('invalid_request', 'cursor: pass the next_cursor of the previous page');
  }
  const page = await book.entries(account.id, limit, before);
  return {
    entries: page.items.map((e) => ({
      kind: e.kind,
      server: e.serverId ?? null,
      from: new Date(e.from).toISOString(),
      to: new Date(e.to).toISOString(),
      ram_gb_hours: e.ramGbHours,
      disk_gb_months: e.diskGbMonths,
      checkpoint_gb_months: e.checkpointGbMonths ?? 0,
      egress_gb: e.egressGb,
      usd: e.usd,
      source: e.source ?? null,
    })),
    next_cursor: page.next ? Buffer.from(JSON.stringify(page.next)).toString('base64url') : null,
  };
}
