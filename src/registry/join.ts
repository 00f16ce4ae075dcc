// A box joins a cluster with everything it has (issue 36 item 1). A single box keeps its accounts,
// key hashes, phones, balances and ledger, custom domains and certificates in LMDB; in cluster
// mode the registry is their truth, so a box that becomes a host (its first start with
// cluster.registry, or `rootbox cluster join`) copies them there before it serves in cluster mode.
// Its servers are placed by hosting's reconcile at start (names.ts: servers without a placement
// are claimed and placed), which this join only checks for subdomains other hosts hold.
//
// - Refusals first: a read of every record another host's records hold (an account id whose key
//   or phone is another's, a key hash or phone of another account, a subdomain or custom domain of
//   another server, a ledger key of another entry) refuses the join with 409 `join_conflict`
//   naming them all, before anything is written.
// - Idempotent and resumable: each account is one transaction (its ledger entries by the
//   keys a host would write them under — usage `<host>:<server>:<periodEnd>`, credits their
//   source — and its money moved by the entries inserted now only, so a balance is copied as
//   ledger entries exactly once, then its row: written last, as its trigger holds the feed's lock
//   until the commit); then domains, the x402 payments it used (locked, so no host
//   takes one again), then certificates (but expired ones), each `ON CONFLICT DO NOTHING`
//   and what was already there checked identical (else refused, named). A box back from a
//   single-box period (its mark cleared) joins its accounts again: one whose key the customer
//   rotated meanwhile (a key the registry never revoked) is applied as a rotation, a phone proven
//   meanwhile is set where the registry has none. A kill -9 at any point
//   leaves committed steps that a second run finds identical and skips.
// - The mark in LMDB (`store.joined`) is written only after the registry committed every step; a
//   box with it does not join again (its records are written through to the registry since).

import type pg from 'pg';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import { round9 } from '../price.js';
import { clusterSecret, type SharedAccount } from './accounts.js';
import type { LedgerRow } from './ledger.js';
import type { RegistryPool } from './pool.js';
import { RegistryShared } from './shared.js';
import type { ClusterKeys } from './token.js';

/** An account as the box has it: the registry's shape, its api key sealed under the host secret. */
export type BoxAccount = SharedAccount;

/** One entry of the box's ledger: the registry's row without its key (the join makes it). */
export type BoxLedgerEntry = Omit<LedgerRow, 'key' | 'checkpointGbMonths'> & { checkpointGbMonths?: number };

/** What the join reads of a box (its store; hosting's `boxRecords` makes it) and the one thing it writes there. */
export interface BoxRecords {
  accounts(): BoxAccount[];
  ledger(accountId: string): BoxLedgerEntry[];
  domains(): { domain: string; serverId: string; accountId: string; state: string }[];
  certificates(): { id: string; names: string[]; certPem: string; keyPem: string; notAfter: number; issuedAt: number }[];
  servers(): { id: string; slug: string; accountId: string }[];
  /** The x402 payments the box used (`asset:payer:nonce`): locked in the registry, so no host takes one again. */
  payments(): string[];
  /** An account's sealed api key as the cluster secret seals it. */
  reseal(keyEnc: string, clusterSecret: Buffer): string;
  joined(): { registry: string; host: string; at: number } | undefined;
  markJoined(m: { registry: string; host: string; at: number }): void;
}

export interface JoinReport {
  /** The box had joined before: nothing was read or written. */
  already: boolean;
  accounts: number;
  entries: number;
  domains: number;
  certificates: number;
  payments: number;
}

export interface JoinOptions {
  pool: RegistryPool;
  host: string;
  keys: ClusterKeys;
  box: BoxRecords;
  log: Logger;
  now?: () => number;
  /** Called at each point a step reached (`<step> committing`, `<step> committed`): what a test kills the process at. */
  step?: (name: string) => void;
}

const dec = (n: number) => round9(n).toFixed(9);
const conflict = (names: string[]) =>
  AppError.of(
    'join_conflict',
    `this box cannot join: ${names.length === 1 ? 'a record of it is' : `${names.length} records of it are`} another host's in the registry: ${names.join('; ')}`,
  );

/** Copies the box's shared records into the registry, then marks it joined (see the header). */
export async function joinRegistry(o: JoinOptions): Promise<JoinReport> {
  const { pool, host, box } = o;
  const report: JoinReport = { already: false, accounts: 0, entries: 0, domains: 0, certificates: 0, payments: 0 };
  if (box.joined()) return { ...report, already: true };
  const accounts = box.accounts();
  const domains = box.domains();
  const certificates = box.certificates();
  const servers = box.servers();
  const mark = () => box.markJoined({ registry: pool.where, host, at: (o.now ?? Date.now)() });
  if (!accounts.length && !domains.length && !certificates.length && !servers.length && !box.payments().length) {
    mark(); // a new host: nothing to copy
    return report;
  }
  o.log.info('joining the cluster: copying this box’s records into the registry', {
    accounts: accounts.length,
    domains: domains.length,
    certificates: certificates.length,
    servers: servers.length,
  });
  const found = await refusals(pool, accounts, domains, servers, (id) => box.ledger(id));
  if (found.length) throw conflict(found);
  const secret = (await clusterSecret(pool, o.keys, true))!;
  for (const a of accounts) {
    const entries = box.ledger(a.id);
    const n = await pool.tx(async (c) => {
      // the account's row last: its feed trigger takes the cluster-wide FEED_LOCK (feed.ts) until
      // the commit, and every host's placement and epoch writes wait on it — not through the ledger batches
      const added = await putEntries(c, a.id, host, entries);
      const why = await putAccount(c, a, host, () => box.reseal(a.keyEnc, secret));
      if (why) throw conflict([why]);
      o.step?.(`account ${a.id} committing`);
      return added;
    });
    report.accounts++;
    report.entries += n;
    o.step?.(`account ${a.id} committed`);
  }
  for (const d of domains) {
    const r = await pool.query(
      `INSERT INTO custom_domains (domain, server_id, account_id, host, state) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (domain) DO NOTHING`,
      [d.domain, d.serverId, d.accountId, host, d.state],
    );
    if (r.rowCount !== 1) {
      const held = await pool.query<{ server_id: string; host: string }>('SELECT server_id, host FROM custom_domains WHERE domain = $1', [d.domain]);
      const h = held.rows[0];
      if (h && h.server_id !== d.serverId) throw conflict([`domain ${d.domain} is server ${h.server_id}'s on ${h.host}`]);
    } else report.domains++;
    o.step?.(`domain ${d.domain} committed`);
  }
  const payments = box.payments();
  for (let i = 0; i < payments.length; i += 1000) {
    // a key another host locked too was the same payment presented there: locked either way
    const r = await pool.query(`INSERT INTO payment_locks (key, host, state) SELECT k, $2, 'used' FROM unnest($1::text[]) AS k ON CONFLICT (key) DO NOTHING`, [
      payments.slice(i, i + 1000),
      host,
    ]);
    report.payments += r.rowCount ?? 0;
    o.step?.(`payments ${i} committed`);
  }
  const shared = new RegistryShared(pool, host, o.keys);
  const now = (o.now ?? Date.now)();
  for (const x of certificates) {
    if (x.notAfter <= now) continue; // expired: nothing a host could serve
    // one the registry has — another host's fresher order, one removed there, this join's before a kill — is the cluster's, kept as it is
    if (await shared.saveCertificate(x, undefined, { ifAbsent: true })) report.certificates++;
    o.step?.(`certificate ${x.id} committed`);
  }
  mark();
  o.log.info('joined the cluster: this box’s records are in the registry', { ...report });
  return report;
}

/** A pool or a transaction's client, for reads. */
type Reader = { query<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<pg.QueryResult<R>> };
type AccountRow = { id: string; key_hash: string; phone: string | null; created_at: string; host: string };

/** What in the box another host's records hold, by name (empty: the join may write). */
async function refusals(
  pool: RegistryPool,
  accounts: readonly BoxAccount[],
  domains: ReturnType<BoxRecords['domains']>,
  servers: ReturnType<BoxRecords['servers']>,
  ledger: (id: string) => BoxLedgerEntry[],
): Promise<string[]> {
  const out: string[] = [];
  for (const a of accounts) {
    const why = await accountRefusal(pool, a);
    if (why) out.push(why);
    // a credit's key is its source (x402 payer and nonce, an admin invocation): another account's is a conflict
    const sources = ledger(a.id).flatMap((e) => (e.kind === 'credit' && e.source ? [e.source] : []));
    if (sources.length) {
      const r = await pool.query<{ key: string; account_id: string }>('SELECT key, account_id FROM ledger_entries WHERE key = ANY($1::text[])', [sources]);
      for (const x of r.rows) if (x.account_id !== a.id) out.push(`credit ${x.key} of account ${a.id} is account ${x.account_id}'s`);
    }
  }
  if (servers.length) {
    const r = await pool.query<{ slug: string; server_id: string; host: string }>('SELECT slug, server_id, host FROM slugs WHERE slug = ANY($1::text[])', [
      servers.map((s) => s.slug),
    ]);
    for (const x of r.rows) {
      const mine = servers.find((s) => s.slug === x.slug);
      if (mine && mine.id !== x.server_id) out.push(`subdomain ${x.slug} (server ${mine.id}) is server ${x.server_id}'s on ${x.host}`);
    }
  }
  if (domains.length) {
    const r = await pool.query<{ domain: string; server_id: string; host: string }>(
      'SELECT domain, server_id, host FROM custom_domains WHERE domain = ANY($1::text[])',
      [domains.map((d) => d.domain)],
    );
    for (const x of r.rows) {
      const mine = domains.find((d) => d.domain === x.domain);
      if (mine && mine.serverId !== x.server_id) out.push(`domain ${x.domain} (server ${mine.serverId}) is server ${x.server_id}'s on ${x.host}`);
    }
  }
  return out;
}

/** Why the registry cannot take the account as the box has it, or undefined: absent, or the same
 *  account (same id and creation) with no other phone — its key the registry's, one the registry
 *  revoked for it (a cached copy a host kept before it rotated: the registry's stays), or another
 *  one the registry never revoked (rotated on the box while it ran alone: putAccount applies it). */
async function accountRefusal(q: Reader, a: BoxAccount): Promise<string | undefined> {
  const r = await q.query<AccountRow>('SELECT id, key_hash, phone, created_at, host FROM accounts WHERE id = $1 OR key_hash = $2 OR phone = $3', [
    a.id,
    a.keyHash,
    a.phone,
  ]);
  const same = r.rows.find((x) => x.id === a.id);
  const other = r.rows.find((x) => x.id !== a.id);
  if (other && other.key_hash === a.keyHash) return `the key of account ${a.id} is account ${other.id}'s (on ${other.host})`;
  if (other && a.phone && other.phone === a.phone) return `phone ${a.phone} of account ${a.id} is account ${other.id}'s (on ${other.host})`;
  if (!same) return undefined;
  if (Number(same.created_at) !== a.createdAt) return `account id ${a.id} is another account's (made on ${same.host})`;
  if (a.phone && same.phone && same.phone !== a.phone) return `account ${a.id} has phone ${same.phone} in the registry, not ${a.phone}`;
  return undefined;
}

/** Whether the registry revoked the box's key of this account (a host rotated it since). */
const revoked = async (q: Reader, a: BoxAccount) =>
  (await q.query('SELECT 1 FROM revoked_keys WHERE key_hash = $1 AND account_id = $2', [a.keyHash, a.id])).rowCount === 1;

/** Writes the account as the box has it, or says why it may not. Absent: inserted. The same account:
 *  the box's key, when the registry never revoked it, replaces the registry's as a rotation (the
 *  registry's into revoked_keys: the box ran alone and its customer rotated it meanwhile), and the
 *  box's phone is set where the registry has none (proven on the box meanwhile). */
async function putAccount(c: pg.PoolClient, a: BoxAccount, host: string, sealed: () => string): Promise<string | undefined> {
  const have = await c.query<{ key_hash: string; phone: string | null }>('SELECT key_hash, phone FROM accounts WHERE id = $1 FOR UPDATE', [a.id]);
  const why = await accountRefusal(c, a);
  if (why) return why;
  const row = have.rows[0];
  if (!row) {
    const r = await c.query(
      `INSERT INTO accounts (id, key_hash, key_enc, phone, created_ip, created_at, host) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
      [a.id, a.keyHash, sealed(), a.phone, a.createdIp, a.createdAt, host],
    );
    return r.rowCount === 1 ? undefined : ((await accountRefusal(c, a)) ?? `account ${a.id} was taken meanwhile`);
  }
  if (row.key_hash !== a.keyHash && !(await revoked(c, a))) {
    await c.query('INSERT INTO revoked_keys (key_hash, account_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [row.key_hash, a.id]);
    await c.query('UPDATE accounts SET key_hash = $2, key_enc = $3 WHERE id = $1', [a.id, a.keyHash, sealed()]);
  }
  if (a.phone && !row.phone) await c.query('UPDATE accounts SET phone = $2 WHERE id = $1 AND phone IS NULL', [a.id, a.phone]);
  return undefined;
}

/** The key a host writes the entry under in the registry (ledger.ts keyOf): a usage period's
 *  `<host>:<server>:<periodEnd>`, a credit's source. */
const registryKey = (e: BoxLedgerEntry, host: string) =>
  e.kind === 'credit' ? (e.source ?? `${host}:credit:${e.accountId}:${e.to}`) : `${host}:${e.serverId ?? e.accountId}:${e.to}`;

/** Writes the account's entries its registry ledger lacks and moves its money by those only (one
 *  transaction with the account's row, under its money row's lock); answers how many were new.
 *  An entry whose key the registry has for another account or amount refuses the join. */
async function putEntries(c: pg.PoolClient, accountId: string, host: string, entries: readonly BoxLedgerEntry[]): Promise<number> {
  await c.query('INSERT INTO account_money (account_id) VALUES ($1) ON CONFLICT (account_id) DO NOTHING', [accountId]);
  const m = (await c.query<Record<string, string>>('SELECT * FROM account_money WHERE account_id = $1 FOR UPDATE', [accountId])).rows[0];
  const t = {
    balance: Number(m.balance_usd),
    ram: Number(m.ram_gb_hours),
    egress: Number(m.egress_gb),
    disk: Number(m.disk_gb_months),
    checkpoints: Number(m.checkpoint_gb_months),
    spent: Number(m.spent_usd),
  };
  let added = 0;
  for (let i = 0; i < entries.length; i += 500) {
    const batch = entries.slice(i, i + 500);
    const keys = batch.map((e) => registryKey(e, host));
    const r = await c.query<{ key: string }>(
      `INSERT INTO ledger_entries (key, account_id, kind, server_id, host, period_from, period_to, ram_gb_hours, disk_gb_months, egress_gb, usd, source, checkpoint_gb_months)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::numeric[], $9::numeric[], $10::numeric[], $11::numeric[], $12::text[], $13::numeric[])
       ON CONFLICT (key) DO NOTHING RETURNING key`,
      [
        keys,
        batch.map(() => accountId),
        batch.map((e) => e.kind),
        batch.map((e) => e.serverId ?? null),
        batch.map(() => host),
        batch.map((e) => e.from),
        batch.map((e) => e.to),
        batch.map((e) => dec(e.ramGbHours)),
        batch.map((e) => dec(e.diskGbMonths)),
        batch.map((e) => dec(e.egressGb)),
        batch.map((e) => dec(e.usd)),
        batch.map((e) => (e.kind === 'credit' ? (e.source ?? null) : null)),
        batch.map((e) => dec(e.checkpointGbMonths ?? 0)),
      ],
    );
    const inserted = new Set(r.rows.map((x) => x.key));
    const there = keys.filter((k) => !inserted.has(k));
    if (there.length) {
      const old = await c.query<{ key: string; account_id: string; kind: string; usd: string }>(
        'SELECT key, account_id, kind, usd FROM ledger_entries WHERE key = ANY($1::text[])',
        [there],
      );
      const byKey = new Map(old.rows.map((x) => [x.key, x]));
      const differ = batch.filter((e, j) => {
        const x = byKey.get(keys[j]);
        return x && (x.account_id !== accountId || x.kind !== e.kind || Number(x.usd) !== round9(e.usd));
      });
      if (differ.length) throw conflict(differ.map((e) => `ledger entry ${registryKey(e, host)} of account ${accountId} is another entry in the registry`));
    }
    batch.forEach((e, j) => {
      if (!inserted.has(keys[j])) return;
      added++;
      if (e.kind === 'credit') t.balance = round9(t.balance + e.usd);
      else {
        t.ram = round9(t.ram + e.ramGbHours);
        t.egress = round9(t.egress + e.egressGb);
        t.disk = round9(t.disk + e.diskGbMonths);
        t.checkpoints = round9(t.checkpoints + (e.checkpointGbMonths ?? 0));
        t.spent = round9(t.spent + e.usd);
        t.balance = round9(t.balance - e.usd);
      }
    });
  }
  if (added)
    await c.query(
      `UPDATE account_money SET balance_usd = $2, ram_gb_hours = $3, egress_gb = $4, disk_gb_months = $5, spent_usd = $6, checkpoint_gb_months = $7, updated_at = now() WHERE account_id = $1`,
      [accountId, dec(t.balance), dec(t.ram), dec(t.egress), dec(t.disk), dec(t.spent), dec(t.checkpoints)],
    );
  return added;
}
