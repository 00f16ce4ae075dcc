// Limits that hold across hosts (cluster mode, issue 35 item 4): each is one atomic check-and-
// reserve in the registry, under a transaction-scoped advisory lock per counted key, so two hosts
// (or two requests on one) never both pass a cap with one place left.
//   - servers per account and per anonymous source address: committed servers are counted from
//     `placements` (a delete removes its row, so nothing else is released), a create in flight
//     by its reservation (`quota_holds`, kind `server`, the server id) until its placement exists;
//     a reservation whose create never committed (the host killed) expires at the create's deadline;
//   - commands running per account (kind `exec`): a reservation per command, removed when it
//     ends; one of a host whose lease lapsed (the host died) no longer counts, and every one
//     expires at its command's deadline;
//   - request rates: token buckets (`rate_buckets`) updated in one statement on the registry's
//     clock, the same rule as the in-memory ones (src/ratelimit.ts), shared by every host.

import type { RegistryPool } from './pool.js';

export const QUOTAS_SQL = `
  CREATE TABLE quota_holds (
    kind        text NOT NULL,
    holder      text NOT NULL,
    account_id  text NOT NULL,
    anon_ip     text,
    host        text NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (kind, holder)
  );
  CREATE INDEX quota_holds_account ON quota_holds (account_id, kind);
  CREATE INDEX quota_holds_ip ON quota_holds (anon_ip) WHERE anon_ip IS NOT NULL;
  CREATE TABLE rate_buckets (
    key     text PRIMARY KEY,
    tokens  double precision NOT NULL,
    at_ms   bigint NOT NULL,
    ok      boolean NOT NULL
  );
  CREATE INDEX placements_account ON placements (account_id);
  CREATE INDEX accounts_created_ip ON accounts (created_ip) WHERE phone IS NULL;`;

/** First key of the two-key advisory locks taken here (a class of its own: the one-key locks of
 *  the change feed and the migrations never meet these). */
const LOCK_CLASS = 35004;
const PRUNE_EVERY_MS = 60_000;
/** Buckets untouched this long are full again for every limit (the longest is creates per hour). */
const BUCKET_KEEP_MS = 2 * 3_600_000;

export interface ServerClaim {
  serverId: string;
  accountId: string;
  maxPerAccount: number;
  /** The address an anonymous account was made from (its servers count there); absent for a verified one. */
  anonIp?: string;
  maxPerIp: number;
  /** Milliseconds the reservation lasts when its create never commits. */
  ttlMs: number;
}

export class RegistryQuotas {
  private lastPrune = 0;

  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
  ) {}

  /** Reserves one more server for the account (and its address); the cap it hits, or undefined
   *  when reserved. */
  async reserveServer(c: ServerClaim): Promise<'account' | 'ip' | undefined> {
    this.prune();
    return this.pool.tx(async (q) => {
      // always the account's lock first, then the address's: no two transactions wait on each other
      await q.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [LOCK_CLASS, `a:${c.accountId}`]);
      if (c.anonIp !== undefined) await q.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [LOCK_CLASS, `i:${c.anonIp}`]);
      const mine = await q.query<{ n: string }>(
        `SELECT (SELECT count(*) FROM placements WHERE account_id = $1)
              + (SELECT count(*) FROM quota_holds h WHERE h.kind = 'server' AND h.account_id = $1 AND h.expires_at > now()
                   AND NOT EXISTS (SELECT 1 FROM placements p WHERE p.server_id = h.holder)) AS n`,
        [c.accountId],
      );
      if (Number(mine.rows[0].n) >= c.maxPerAccount) return 'account';
      if (c.anonIp !== undefined) {
        const there = await q.query<{ n: string }>(
          `SELECT (SELECT count(*) FROM placements p JOIN accounts a ON a.id = p.account_id WHERE a.created_ip = $1 AND a.phone IS NULL)
                + (SELECT count(*) FROM quota_holds h WHERE h.kind = 'server' AND h.anon_ip = $1 AND h.expires_at > now()
                     AND NOT EXISTS (SELECT 1 FROM placements p WHERE p.server_id = h.holder)) AS n`,
          [c.anonIp],
        );
        if (Number(there.rows[0].n) >= c.maxPerIp) return 'ip';
      }
      await q.query(
        `INSERT INTO quota_holds (kind, holder, account_id, anon_ip, host, expires_at)
         VALUES ('server', $1, $2, $3, $4, now() + make_interval(secs => $5::double precision / 1000))`,
        [c.serverId, c.accountId, c.anonIp ?? null, this.host, c.ttlMs],
      );
      return undefined;
    });
  }

  /** The create committed (its placement counts now) or failed: its reservation goes. */
  async releaseServer(serverId: string): Promise<void> {
    await this.pool.query(`DELETE FROM quota_holds WHERE kind = 'server' AND holder = $1`, [serverId]);
  }

  /** Reserves one more running command for the account; false at the cap. Commands of hosts
   *  whose lease lapsed are not counted (they died with their host). */
  async reserveExec(accountId: string, execId: string, max: number, ttlMs: number): Promise<boolean> {
    this.prune();
    return this.pool.tx(async (q) => {
      await q.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [LOCK_CLASS, `e:${accountId}`]);
      const r = await q.query<{ n: string }>(
        `SELECT count(*) AS n FROM quota_holds h
          WHERE h.kind = 'exec' AND h.account_id = $1 AND h.expires_at > now()
            AND (h.host = $2 OR EXISTS (SELECT 1 FROM hosts WHERE hosts.name = h.host AND hosts.lease_until > now()))`,
        [accountId, this.host],
      );
      if (Number(r.rows[0].n) >= max) return false;
      await q.query(
        `INSERT INTO quota_holds (kind, holder, account_id, host, expires_at)
         VALUES ('exec', $1, $2, $3, now() + make_interval(secs => $4::double precision / 1000))`,
        [execId, accountId, this.host, ttlMs],
      );
      return true;
    });
  }

  async releaseExec(execId: string): Promise<void> {
    await this.pool.query(`DELETE FROM quota_holds WHERE kind = 'exec' AND holder = $1`, [execId]);
  }

  /** At this host's start: every reservation it made before (creates a kill cut off, commands that
   *  died with the previous daemon) goes; nothing of this host is in flight yet. */
  async releaseOwn(): Promise<number> {
    return (await this.pool.query('DELETE FROM quota_holds WHERE host = $1', [this.host])).rowCount ?? 0;
  }

  /** Takes one token from the shared bucket `key` (`burst` at most, refilled `perSecond`): 0 when
   *  taken, else the seconds until one would be there. One statement, on the registry's clock. */
  async take(key: string, burst: number, perSecond: number): Promise<number> {
    this.prune();
    const r = await this.pool.query<{ ok: boolean; tokens: number }>(
      `WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now)
       INSERT INTO rate_buckets AS b (key, tokens, at_ms, ok) SELECT $1, $2::double precision - 1, t.now, true FROM t
       ON CONFLICT (key) DO UPDATE SET
         tokens = CASE WHEN least($2::double precision, b.tokens + greatest(0, EXCLUDED.at_ms - b.at_ms) * $3::double precision / 1000) >= 1
                       THEN least($2::double precision, b.tokens + greatest(0, EXCLUDED.at_ms - b.at_ms) * $3::double precision / 1000) - 1
                       ELSE least($2::double precision, b.tokens + greatest(0, EXCLUDED.at_ms - b.at_ms) * $3::double precision / 1000) END,
         ok = least($2::double precision, b.tokens + greatest(0, EXCLUDED.at_ms - b.at_ms) * $3::double precision / 1000) >= 1,
         at_ms = greatest(b.at_ms, EXCLUDED.at_ms)
       RETURNING ok, tokens`,
      [key, burst, perSecond],
    );
    const row = r.rows[0];
    return row.ok ? 0 : Math.max(1, Math.ceil((1 - row.tokens) / perSecond));
  }

  /** At most once a minute: expired reservations and long-full buckets are deleted (they no
   *  longer count either way; this only keeps the tables small). */
  private prune(now = Date.now()): void {
    if (now - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = now;
    void this.pool
      .query(`DELETE FROM quota_holds WHERE expires_at < now() - interval '1 minute'`)
      .then(() => this.pool.query(`DELETE FROM rate_buckets WHERE at_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1`, [BUCKET_KEEP_MS]))
      .catch(() => {}); // tried again a minute later
  }
}
