// Money in the registry (schema 5): an append-only ledger whose entries are each written once by
// a key the host chooses (usage: `<host>:<serverId>:<periodEnd>`, credits: their source key), and
// per-account totals (balance, usage, spent) changed in the same transaction as the entry, under
// the account row's lock, so two hosts metering one account at once sum exactly. A usage entry's
// dollars are computed inside that transaction: grant first (from the registry's usage totals),
// then balance, as on a single box (store/billing.ts charge). `INSERT … ON CONFLICT DO NOTHING`
// makes a retry after a lost commit reply harmless. Checkpoint storage (schema 19) has its own
// columns in both, as the single box keeps it in its entries and totals. The bytes checkpoints
// hold now (schema 22) are a figure per server, not an entry: each host writes its servers' (at
// every metering pass, and when one is taken or deleted) and checkpointsElsewhere() sums the
// other hosts'.

import type pg from 'pg';
import { periodCost, round9 } from '../price.js';
import type { RegistryPool } from './pool.js';

/** One entry a host sends (its metering outbox, or a credit). */
export type LedgerWrite =
  | {
      kind: 'usage';
      accountId: string;
      serverId: string;
      from: number;
      to: number;
      ramGbHours: number;
      diskGbMonths: number;
      /** GB-months of checkpoint storage (absent in an outbox entry queued before it was metered). */
      checkpointGbMonths?: number;
      egressGb: number;
      /** The account's grant and the prices when the period was metered. */
      grant: { ramGbHours: number; egressGb: number };
      prices: { ramUsdPerGbHour: number; diskUsdPerGbMonth: number; egressUsdPerGb: number; checkpointUsdPerGbMonth?: number };
    }
  | { kind: 'credit'; accountId: string; usd: number; source: string; at: number };

/** An account's money as the registry has it. */
export interface AccountMoney {
  balanceUsd: number;
  ramGbHours: number;
  egressGb: number;
  diskGbMonths: number;
  checkpointGbMonths: number;
  spentUsd: number;
}

/** A server's stored checkpoint bytes as its host reports them. */
export interface CheckpointBytes {
  serverId: string;
  accountId: string;
  bytes: number;
}

export interface LedgerRow {
  kind: 'usage' | 'credit';
  accountId: string;
  serverId?: string;
  from: number;
  to: number;
  ramGbHours: number;
  diskGbMonths: number;
  checkpointGbMonths: number;
  egressGb: number;
  usd: number;
  source?: string;
  key: string;
}

/** A number as the exact decimal the numeric columns take (9 places, like the single box). */
const dec = (n: number) => round9(n).toFixed(9);

export class RegistryLedger {
  constructor(
    private readonly pool: RegistryPool,
    readonly host: string,
  ) {}

  /** The key an entry is written once by. */
  keyOf(w: LedgerWrite): string {
    return w.kind === 'usage' ? `${this.host}:${w.serverId}:${w.to}` : w.source;
  }

  /** Writes a batch in one transaction (accounts locked in id order: two hosts never deadlock);
   *  answers the keys newly applied (the others were written before) and the accounts' totals. */
  async write(batch: readonly LedgerWrite[]): Promise<{ applied: Set<string>; totals: Map<string, AccountMoney> }> {
    const sorted = [...batch].sort((a, b) => (a.accountId < b.accountId ? -1 : a.accountId > b.accountId ? 1 : 0));
    return this.pool.tx(async (c) => {
      const applied = new Set<string>();
      const totals = new Map<string, AccountMoney>();
      for (const w of sorted) {
        let t = totals.get(w.accountId);
        if (!t) {
          t = await lockAccount(c, w.accountId);
          totals.set(w.accountId, t);
        }
        const key = this.keyOf(w);
        if (await this.insert(c, key, w, t)) applied.add(key);
      }
      for (const [id, t] of totals)
        await c.query(
          `UPDATE account_money SET balance_usd = $2, ram_gb_hours = $3, egress_gb = $4, disk_gb_months = $5, spent_usd = $6, checkpoint_gb_months = $7, updated_at = now() WHERE account_id = $1`,
          [id, dec(t.balanceUsd), dec(t.ramGbHours), dec(t.egressGb), dec(t.diskGbMonths), dec(t.spentUsd), dec(t.checkpointGbMonths)],
        );
      return { applied, totals };
    });
  }

  /** Inserts one entry unless its key is there already; moves `t` by it when it was inserted. */
  private async insert(c: pg.PoolClient, key: string, w: LedgerWrite, t: AccountMoney): Promise<boolean> {
    if (w.kind === 'credit') {
      const r = await c.query(
        `INSERT INTO ledger_entries (key, account_id, kind, host, period_from, period_to, usd, source) VALUES ($1, $2, 'credit', $3, $4, $4, $5, $6) ON CONFLICT (key) DO NOTHING`,
        [key, w.accountId, this.host, w.at, dec(w.usd), w.source],
      );
      if (r.rowCount !== 1) return false;
      t.balanceUsd = round9(t.balanceUsd + w.usd);
      return true;
    }
    const usd = periodCost(w, t, w.grant, w.prices);
    const checkpoints = w.checkpointGbMonths ?? 0;
    const r = await c.query(
      `INSERT INTO ledger_entries (key, account_id, kind, server_id, host, period_from, period_to, ram_gb_hours, disk_gb_months, egress_gb, usd, checkpoint_gb_months)
       VALUES ($1, $2, 'usage', $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (key) DO NOTHING`,
      [key, w.accountId, w.serverId, this.host, w.from, w.to, dec(w.ramGbHours), dec(w.diskGbMonths), dec(w.egressGb), dec(usd), dec(checkpoints)],
    );
    if (r.rowCount !== 1) return false;
    t.ramGbHours = round9(t.ramGbHours + w.ramGbHours);
    t.egressGb = round9(t.egressGb + w.egressGb);
    t.diskGbMonths = round9(t.diskGbMonths + w.diskGbMonths);
    t.checkpointGbMonths = round9(t.checkpointGbMonths + checkpoints);
    t.spentUsd = round9(t.spentUsd + usd);
    t.balanceUsd = round9(t.balanceUsd - usd);
    return true;
  }

  /** The totals of these accounts (absent: nothing written for it yet, all zero). */
  async totals(ids: readonly string[]): Promise<Map<string, AccountMoney>> {
    const out = new Map<string, AccountMoney>();
    if (ids.length === 0) return out;
    const r = await this.pool.query<MoneyRow>(`SELECT ${MONEY_COLUMNS} FROM account_money WHERE account_id = ANY($1::text[])`, [[...ids]]);
    for (const row of r.rows) out.set(row.account_id, money(row));
    return out;
  }

  /** Bytes the checkpoints of these accounts hold now on every other host (0 for each without any). */
  async checkpointsElsewhere(ids: readonly string[]): Promise<Map<string, number>> {
    const out = new Map(ids.map((id) => [id, 0]));
    if (ids.length === 0) return out;
    const r = await this.pool.query<{ account_id: string; bytes: string }>(
      `SELECT account_id, sum(bytes)::text AS bytes FROM checkpoint_bytes WHERE account_id = ANY($1::text[]) AND host <> $2 GROUP BY account_id`,
      [[...ids], this.host],
    );
    for (const x of r.rows) out.set(x.account_id, Number(x.bytes));
    return out;
  }

  /** Records the stored checkpoint bytes of servers of this host (0: none, the row goes); `all`:
   *  these are all of them, so this host's rows of other servers (deleted, moved away) go too. A
   *  server moved here takes its row over from the host it left. */
  async reportCheckpoints(rows: readonly CheckpointBytes[], all: boolean): Promise<void> {
    const kept = rows.filter((r) => r.bytes > 0);
    await this.pool.tx(async (c) => {
      if (all) await c.query('DELETE FROM checkpoint_bytes WHERE host = $1 AND NOT (server_id = ANY($2::text[]))', [this.host, kept.map((r) => r.serverId)]);
      const gone = rows.filter((r) => !(r.bytes > 0)).map((r) => r.serverId);
      if (gone.length) await c.query('DELETE FROM checkpoint_bytes WHERE host = $1 AND server_id = ANY($2::text[])', [this.host, gone]);
      if (kept.length === 0) return;
      await c.query(
        `INSERT INTO checkpoint_bytes (server_id, host, account_id, bytes)
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS t(server_id, host, account_id, bytes) ORDER BY 1
         ON CONFLICT (server_id) DO UPDATE SET host = EXCLUDED.host, account_id = EXCLUDED.account_id, bytes = EXCLUDED.bytes, updated_at = now()`,
        [kept.map((r) => r.serverId), kept.map(() => this.host), kept.map((r) => r.accountId), kept.map((r) => Math.round(r.bytes))],
      );
    });
  }

  /** Answers once the registry takes writes (a recharge asks before its payment is settled). */
  async ready(): Promise<void> {
    await this.pool.query('SELECT 1');
  }

  /** An account's entries, newest first, after an optional cursor (exclusive), from every host. */
  async entries(accountId: string, limit: number, before?: [number, string]): Promise<{ items: LedgerRow[]; next?: [number, string] }> {
    const r = await this.pool.query<EntryRow>(
      `SELECT key, kind, account_id, server_id, period_from, period_to, ram_gb_hours, disk_gb_months, checkpoint_gb_months, egress_gb, usd, source FROM ledger_entries
       WHERE account_id = $1 AND ($2::bigint IS NULL OR (period_to, key) < ($2::bigint, $3::text))
       ORDER BY period_to DESC, key DESC LIMIT $4`,
      [accountId, before?.[0] ?? null, before?.[1] ?? '', limit],
    );
    const items = r.rows.map((e): LedgerRow => ({
      key: e.key,
      kind: e.kind,
      accountId: e.account_id,
      serverId: e.server_id ?? undefined,
      from: Number(e.period_from),
      to: Number(e.period_to),
      ramGbHours: Number(e.ram_gb_hours),
      diskGbMonths: Number(e.disk_gb_months),
      checkpointGbMonths: Number(e.checkpoint_gb_months),
      egressGb: Number(e.egress_gb),
      usd: Number(e.usd),
      source: e.source ?? undefined,
    }));
    const last = items[items.length - 1];
    return { items, next: items.length >= limit && last ? [last.to, last.key] : undefined };
  }
}

interface MoneyRow {
  account_id: string;
  balance_usd: string;
  ram_gb_hours: string;
  egress_gb: string;
  disk_gb_months: string;
  checkpoint_gb_months: string;
  spent_usd: string;
}
interface EntryRow {
  key: string;
  kind: 'usage' | 'credit';
  account_id: string;
  server_id: string | null;
  period_from: string;
  period_to: string;
  ram_gb_hours: string;
  disk_gb_months: string;
  checkpoint_gb_months: string;
  egress_gb: string;
  usd: string;
  source: string | null;
}

const MONEY_COLUMNS = 'account_id, balance_usd, ram_gb_hours, egress_gb, disk_gb_months, checkpoint_gb_months, spent_usd';
const money = (r: MoneyRow): AccountMoney => ({
  balanceUsd: Number(r.balance_usd),
  ramGbHours: Number(r.ram_gb_hours),
  egressGb: Number(r.egress_gb),
  diskGbMonths: Number(r.disk_gb_months),
  checkpointGbMonths: Number(r.checkpoint_gb_months),
  spentUsd: Number(r.spent_usd),
});

/** The account's totals row, made at zero when it has none, locked until the transaction ends. */
async function lockAccount(c: pg.PoolClient, id: string): Promise<AccountMoney> {
  await c.query('INSERT INTO account_money (account_id) VALUES ($1) ON CONFLICT (account_id) DO NOTHING', [id]);
  const r = await c.query<MoneyRow>(`SELECT ${MONEY_COLUMNS} FROM account_money WHERE account_id = $1 FOR UPDATE`, [id]);
  return money(r.rows[0]);
}

/** Schema 5 (migrations.ts). */
export const LEDGER_SQL = `
  CREATE TABLE ledger_entries (
    key             text PRIMARY KEY,
    account_id      text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('usage', 'credit')),
    server_id       text,
    host            text NOT NULL,
    period_from     bigint NOT NULL,
    period_to       bigint NOT NULL,
    ram_gb_hours    numeric(24, 9) NOT NULL DEFAULT 0,
    disk_gb_months  numeric(24, 9) NOT NULL DEFAULT 0,
    egress_gb       numeric(24, 9) NOT NULL DEFAULT 0,
    usd             numeric(24, 9) NOT NULL,
    source          text,
    written_at      timestamptz NOT NULL DEFAULT now()
  );
  CREATE INDEX ledger_entries_account ON ledger_entries (account_id, period_to DESC, key DESC);
  CREATE TABLE account_money (
    account_id      text PRIMARY KEY,
    balance_usd     numeric(24, 9) NOT NULL DEFAULT 0,
    ram_gb_hours    numeric(24, 9) NOT NULL DEFAULT 0,
    egress_gb       numeric(24, 9) NOT NULL DEFAULT 0,
    disk_gb_months  numeric(24, 9) NOT NULL DEFAULT 0,
    spent_usd       numeric(24, 9) NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
  );`;

/** Schema 19 (migrations.ts): checkpoint storage in the entries and the totals, as the single box
 *  keeps it (entries written before it read 0, as a single box's older entries do). */
export const CHECKPOINT_LEDGER_SQL = `
  ALTER TABLE ledger_entries ADD COLUMN checkpoint_gb_months numeric(24, 9) NOT NULL DEFAULT 0;
  ALTER TABLE account_money ADD COLUMN checkpoint_gb_months numeric(24, 9) NOT NULL DEFAULT 0;`;

/** Schema 22 (migrations.ts): the bytes each server's checkpoints hold now, written by its host. */
export const CHECKPOINT_BYTES_SQL = `
  CREATE TABLE checkpoint_bytes (
    server_id   text PRIMARY KEY,
    host        text NOT NULL,
    account_id  text NOT NULL,
    bytes       bigint NOT NULL CHECK (bytes > 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
  );
  CREATE INDEX checkpoint_bytes_account ON checkpoint_bytes (account_id);`;
