// Limits that hold across hosts (cluster mode, issue 35 item 4): each is one atomic check-and-
// reserve in the registry, one round trip (a function taking a transaction-scoped advisory lock
// per counted key, then counting and inserting), so two hosts (or two requests on one) never both
// pass a cap with one place left, and no pool connection waits across round trips.
//   - servers per account and per anonymous source address: committed servers are counted from
//     `placements` (a delete removes its row, so nothing else is released), a create in flight
//     by its reservation (`quota_holds`, kind `server`, the server id) until its placement exists;
//     a reservation whose create never committed (the host killed) goes when that host starts
//     again (releaseOwn), or expires at the create's deadline;
//   - commands running per account (kind `exec`): a reservation per command, removed when it
//     ends; one of a host whose lease lapsed (the host died) no longer counts, and every one
//     expires at its command's deadline;
//   - request rates: token buckets (`rate_buckets`) on the registry's clock, the same rule as the
//     in-memory ones (src/ratelimit.ts), shared by every host; a host takes a few tokens at a
//     time and spends them itself (hosting/quotas.ts), so most requests cost no round trip.

import type { RegistryPool } from './pool.js';

/** First key of the two-key advisory locks taken here (a class of its own: the one-key locks of
 *  the change feed and the migrations never meet these). */
const LOCK_CLASS = 35004;

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
    at_ms   bigint NOT NULL
  );
  CREATE INDEX placements_account ON placements (account_id);
  CREATE INDEX accounts_created_ip ON accounts (created_ip) WHERE phone IS NULL;
  -- one round trip each: the lock, then the counts (each statement of a function sees what
  -- committed before it, so what the previous holder of the lock inserted), then the insert; the
  -- lock is held until the calling statement commits
  CREATE FUNCTION rootbox_reserve_server(p_server text, p_account text, p_max_account int, p_ip text, p_max_ip int, p_host text, p_ttl_ms double precision)
  RETURNS text LANGUAGE plpgsql AS $$
  DECLARE n bigint;
  BEGIN
    -- always the account's lock first, then the address's: no two callers wait on each other
    PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, hashtext('a:' || p_account));
    IF p_ip IS NOT NULL THEN PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, hashtext('i:' || p_ip)); END IF;
    SELECT (SELECT count(*) FROM placements WHERE account_id = p_account AND lost_at IS NULL)
         + (SELECT count(*) FROM quota_holds h WHERE h.kind = 'server' AND h.account_id = p_account AND h.expires_at > now()
              AND NOT EXISTS (SELECT 1 FROM placements p WHERE p.server_id = h.holder)) INTO n;
    IF n >= p_max_account THEN RETURN 'account'; END IF;
    IF p_ip IS NOT NULL THEN
      SELECT (SELECT count(*) FROM placements p JOIN accounts a ON a.id = p.account_id WHERE a.created_ip = p_ip AND a.phone IS NULL AND p.lost_at IS NULL)
           + (SELECT count(*) FROM quota_holds h WHERE h.kind = 'server' AND h.anon_ip = p_ip AND h.expires_at > now()
                AND NOT EXISTS (SELECT 1 FROM placements p WHERE p.server_id = h.holder)) INTO n;
      IF n >= p_max_ip THEN RETURN 'ip'; END IF;
    END IF;
    INSERT INTO quota_holds (kind, holder, account_id, anon_ip, host, expires_at)
      VALUES ('server', p_server, p_account, p_ip, p_host, now() + make_interval(secs => p_ttl_ms / 1000));
    RETURN NULL;
  END $$;
  -- commands of a host whose lease lapsed are not counted (they died with their host)
  CREATE FUNCTION rootbox_reserve_exec(p_holder text, p_account text, p_max int, p_host text, p_ttl_ms double precision)
  RETURNS boolean LANGUAGE plpgsql AS $$
  DECLARE n bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, hashtext('e:' || p_account));
    SELECT count(*) FROM quota_holds h
      WHERE h.kind = 'exec' AND h.account_id = p_account AND h.expires_at > now()
        AND (h.host = p_host OR EXISTS (SELECT 1 FROM hosts WHERE hosts.name = h.host AND hosts.lease_until > now())) INTO n;
    IF n >= p_max THEN RETURN false; END IF;
    INSERT INTO quota_holds (kind, holder, account_id, host, expires_at)
      VALUES ('exec', p_holder, p_account, p_host, now() + make_interval(secs => p_ttl_ms / 1000));
    RETURN true;
  END $$;
  -- up to p_want tokens out of the bucket p_key (p_burst at most, refilled p_rate a second on the
  -- registry's clock): how many were taken, and what is left
  CREATE FUNCTION rootbox_take_tokens(p_key text, p_burst double precision, p_rate double precision, p_want int, OUT granted int, OUT left_tokens double precision)
  LANGUAGE plpgsql AS $$
  DECLARE
    t bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    have double precision;
    at bigint;
  BEGIN
    INSERT INTO rate_buckets (key, tokens, at_ms) VALUES (p_key, p_burst, t) ON CONFLICT (key) DO NOTHING;
    SELECT b.tokens, b.at_ms INTO have, at FROM rate_buckets b WHERE b.key = p_key FOR UPDATE;
    have := least(p_burst, have + greatest(0, t - at) * p_rate / 1000);
    granted := least(p_want, floor(have))::int;
    left_tokens := have - granted;
    UPDATE rate_buckets SET tokens = left_tokens, at_ms = greatest(at, t) WHERE key = p_key;
  END $$;`;

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
    const r = await this.pool.query<{ refused: 'account' | 'ip' | null }>('SELECT rootbox_reserve_server($1, $2, $3, $4, $5, $6, $7) AS refused', [
      c.serverId,
      c.accountId,
      c.maxPerAccount,
      c.anonIp ?? null,
      c.maxPerIp,
      this.host,
      c.ttlMs,
    ]);
    return r.rows[0].refused ?? undefined;
  }

  /** The create committed (its placement counts now) or failed: its reservation goes. */
  async releaseServer(serverId: string): Promise<void> {
    await this.pool.query(`DELETE FROM quota_holds WHERE kind = 'server' AND holder = $1`, [serverId]);
  }

  /** Reserves one more running command for the account; false at the cap. Commands of hosts
   *  whose lease lapsed are not counted (they died with their host). */
  async reserveExec(accountId: string, execId: string, max: number, ttlMs: number): Promise<boolean> {
    this.prune();
    const r = await this.pool.query<{ ok: boolean }>('SELECT rootbox_reserve_exec($1, $2, $3, $4, $5) AS ok', [execId, accountId, max, this.host, ttlMs]);
    return r.rows[0].ok;
  }

  async releaseExec(execId: string): Promise<void> {
    await this.pool.query(`DELETE FROM quota_holds WHERE kind = 'exec' AND holder = $1`, [execId]);
  }

  /** At this host's start: every reservation it made before (creates a kill cut off, commands that
   *  died with the previous daemon) goes; nothing of this host is in flight yet. */
  async releaseOwn(): Promise<number> {
    return (await this.pool.query('DELETE FROM quota_holds WHERE host = $1', [this.host])).rowCount ?? 0;
  }

  /** Takes up to `want` tokens from the shared bucket `key` (`burst` at most, refilled
   *  `perSecond`), one round trip on the registry's clock: how many were taken, and when none
   *  were, the seconds until one is there. */
  async take(key: string, burst: number, perSecond: number, want = 1): Promise<{ granted: number; retryAfter: number }> {
    this.prune();
    const r = await this.pool.query<{ granted: number; left_tokens: number }>('SELECT * FROM rootbox_take_tokens($1, $2, $3, $4)', [
      key,
      burst,
      perSecond,
      want,
    ]);
    const { granted, left_tokens: left } = r.rows[0];
    return { granted, retryAfter: granted > 0 ? 0 : Math.max(1, Math.ceil((1 - left) / perSecond)) };
  }

  /** Tokens a host took and did not spend, back into the bucket (never above the burst). */
  async give(key: string, tokens: number, burst: number): Promise<void> {
    await this.pool.query('UPDATE rate_buckets SET tokens = least($3::double precision, tokens + $2) WHERE key = $1', [key, tokens, burst]);
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
