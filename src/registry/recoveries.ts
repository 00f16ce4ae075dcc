// Recovery of a dead host's servers in the registry (issue 38 item 3; the work itself is
// moves/recover.ts): one lease row so that one host at a time recovers (the compare-and-set on
// each placement's epoch stays the final guard: names.ts moveHere), what a recovery needs to know
// of each server the dead host was placed with (its placement, its SSH key, its settings — schema
// 25, settings.ts — and own domains, when it last ran by its host's clock: each host writes the
// time for its running servers every few seconds, so a server whose newest checkpoint is older
// than that lost what it did since), and the outcome of each server's recovery (recovered where,
// unrecoverable and why — no checkpoint —, failed), which `cluster status` lists. Schema 24.

import type { RegistryPool } from './pool.js';
import type { Placement } from './names.js';

/** Schema 24: the recovery lease and every server's recovery outcome. */
export const RECOVERY_SQL = `
  CREATE TABLE recovery_lease (
    id      int PRIMARY KEY CHECK (id = 1),
    holder  text NOT NULL,
    dead    text NOT NULL,
    until   timestamptz NOT NULL
  );
  CREATE TABLE recoveries (
    server_id  text PRIMARY KEY,
    from_host  text NOT NULL,
    to_host    text,
    outcome    text NOT NULL,
    detail     text NOT NULL,
    lost_ms    bigint,
    at         timestamptz NOT NULL DEFAULT now()
  );
  CREATE TABLE server_activity (
    server_id  text PRIMARY KEY,
    host       text NOT NULL,
    active_at  bigint NOT NULL
  );`;

/** A server of the dead host as the registry places it (part of its `Placement`), with its SSH key
 *  when recorded and what a recovery brings back beside it. */
export interface DeadPlacement extends Pick<Placement, 'serverId' | 'accountId' | 'slug' | 'epoch'> {
  publicKey?: string;
  fingerprint?: string;
  /** When its host last saw it running (its wall clock, ms); undefined: never seen running. */
  activeAt?: number;
  /** Its settings as its host last wrote them (settings.ts, schema 25); undefined: none written. */
  neverSleep?: boolean;
  exposed?: number[];
  /** Suspended when its host last wrote its settings (schema 29), and the flag that says whose. */
  suspended?: boolean;
  flag?: string | null;
}

/** A server's own domain as the registry's claim has it (shared-schema.ts `custom_domains`). */
export interface DeadDomain {
  domain: string;
  serverId: string;
  accountId: string;
  state: string;
  claimedAt: number;
}

export type RecoveryOutcome = 'recovered' | 'unrecoverable' | 'failed';

export interface RecoveryRow {
  server_id: string;
  from_host: string;
  to_host: string | null;
  outcome: RecoveryOutcome;
  detail: string;
  lost_ms: number | null;
  at: string;
}

export class RegistryRecoveries {
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
  ) {}

  /** Takes (or renews) the one recovery lease for `ms`, to recover `dead`; false while another host holds it. */
  async lease(dead: string, ms: number): Promise<boolean> {
    const r = await this.pool.query<{ holder: string }>(
      `INSERT INTO recovery_lease (id, holder, dead, until) VALUES (1, $1, $2, now() + make_interval(secs => $3::double precision / 1000))
         ON CONFLICT (id) DO UPDATE SET holder = $1, dead = $2, until = EXCLUDED.until
         WHERE recovery_lease.until < now() OR recovery_lease.holder = $1
       RETURNING holder`,
      [this.host, dead, ms],
    );
    return r.rowCount === 1;
  }

  /** Gives the lease back (only this host's). */
  async release(): Promise<void> {
    await this.pool.query('DELETE FROM recovery_lease WHERE id = 1 AND holder = $1', [this.host]);
  }

  /** Every server the registry places on `host` now (not lost), with its SSH key. */
  async placedOn(host: string): Promise<DeadPlacement[]> {
    const r = await this.pool.query<{
      server_id: string;
      account_id: string;
      slug: string;
      epoch: string;
      public_key: string | null;
      fingerprint: string | null;
      active_at: string | null;
      never_sleep: boolean | null;
      exposed: number[] | null;
      suspended: boolean | null;
      flag: string | null;
    }>(
      `SELECT p.server_id, p.account_id, p.slug, p.epoch, k.public_key, k.fingerprint, a.active_at, s.never_sleep, s.exposed, s.suspended, s.flag
         FROM placements p LEFT JOIN server_keys k ON k.server_id = p.server_id
           LEFT JOIN server_activity a ON a.server_id = p.server_id AND a.host = p.host
           LEFT JOIN server_settings s ON s.server_id = p.server_id
        WHERE p.host = $1 AND p.lost_at IS NULL ORDER BY p.server_id`,
      [host],
    );
    return r.rows.map((x) => ({
      serverId: x.server_id,
      accountId: x.account_id,
      slug: x.slug,
      epoch: Number(x.epoch),
      ...(x.public_key ? { publicKey: x.public_key } : {}),
      ...(x.fingerprint ? { fingerprint: x.fingerprint } : {}),
      ...(x.active_at !== null ? { activeAt: Number(x.active_at) } : {}),
      ...(x.never_sleep !== null ? { neverSleep: x.never_sleep, exposed: (x.exposed ?? []).map(Number) } : {}),
      ...(x.suspended ? { suspended: true, flag: x.flag } : {}),
    }));
  }

  /** The own domains the registry holds for server `serverId` (whichever host claimed them). */
  async domainsOf(serverId: string): Promise<DeadDomain[]> {
    const r = await this.pool.query<{ domain: string; server_id: string; account_id: string; state: string; claimed_at: Date }>(
      'SELECT domain, server_id, account_id, state, claimed_at FROM custom_domains WHERE server_id = $1 ORDER BY domain',
      [serverId],
    );
    return r.rows.map((x) => ({
      domain: x.domain,
      serverId: x.server_id,
      accountId: x.account_id,
      state: x.state,
      claimedAt: new Date(x.claimed_at).getTime(),
    }));
  }

  /** Marks `ids` (this host's running servers) active at `at` (this host's wall clock, ms). */
  async active(ids: readonly string[], at: number): Promise<void> {
    if (!ids.length) return;
    await this.pool.query(
      `INSERT INTO server_activity (server_id, host, active_at) SELECT id, $1, $3 FROM unnest($2::text[]) AS id
         ON CONFLICT (server_id) DO UPDATE SET host = $1, active_at = $3
           WHERE server_activity.host <> $1 OR server_activity.active_at < $3`,
      [this.host, ids, at],
    );
  }

  /** Records how a server's recovery ended. */
  async record(o: { serverId: string; from: string; to?: string; outcome: RecoveryOutcome; detail: string; lostMs?: number }): Promise<void> {
    await this.pool.query(
      `INSERT INTO recoveries (server_id, from_host, to_host, outcome, detail, lost_ms, at) VALUES ($1, $2, $3, $4, $5, $6, now())
         ON CONFLICT (server_id) DO UPDATE SET from_host = $2, to_host = $3, outcome = $4, detail = $5, lost_ms = $6, at = now()`,
      [o.serverId, o.from, o.to ?? null, o.outcome, o.detail.slice(0, 2000), o.lostMs ?? null],
    );
  }

  /** Every recovery's outcome, newest first (`cluster status`). */
  async list(limit = 200): Promise<RecoveryRow[]> {
    const r = await this.pool.query<RecoveryRow & { lost_ms: string | null; at: Date }>(
      'SELECT server_id, from_host, to_host, outcome, detail, lost_ms, at FROM recoveries ORDER BY at DESC LIMIT $1',
      [limit],
    );
    return r.rows.map((x) => ({ ...x, lost_ms: x.lost_ms === null ? null : Number(x.lost_ms), at: new Date(x.at).toISOString() }));
  }
}
