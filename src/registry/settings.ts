// A server's settings that live neither in its disk nor in another registry record (issue 38:
// what a recovery brings back without the dead host's store): never_sleep and the container ports
// it exposes (their public ports are each host's own, re-allocated where it runs). One row per
// server, written by the host the registry places it on whenever one of them changes (create,
// /expose, DELETE /expose, a start's reconcile) — so a change after the server's newest checkpoint
// is not lost, as it would be in the checkpoint's manifest. A host writes only rows of servers
// placed on it (the placement read in the same statement), so a host that lost a server to a move
// or a recovery cannot overwrite what its new owner wrote. The row goes with the placement
// (names.ts `remove`). Schema 25; schema 29 added the server's suspension (suspended, and the flag
// that says whose: an operator's suspension outlasts a recovery on another host).

import type { RegistryPool } from './pool.js';

/** Schema 25: never_sleep and the exposed container ports of every server. */
export const SETTINGS_SQL = `
  CREATE TABLE server_settings (
    server_id    text PRIMARY KEY,
    never_sleep  boolean NOT NULL,
    exposed      int[] NOT NULL DEFAULT '{}',
    host         text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
  );`;

/** Schema 29: whether the server is suspended, and its flag (whose suspension: billing/enforce.ts). */
export const SETTINGS_SUSPENSION_SQL = `
  ALTER TABLE server_settings ADD COLUMN suspended boolean NOT NULL DEFAULT false, ADD COLUMN flag text;`;

export interface ServerSettingsRow {
  serverId: string;
  neverSleep: boolean;
  /** Container ports exposed (the public ports are the holder's own). */
  exposed: number[];
  /** Suspended (an operator's or billing's), and its flag; absent: not suspended. */
  suspended?: boolean;
  flag?: string | null;
}

export class RegistrySettings {
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
  ) {}

  /** Writes the rows of servers the registry places on this host (others are left alone); an unchanged row writes nothing. */
  async put(rows: readonly ServerSettingsRow[]): Promise<void> {
    if (!rows.length) return;
    await this.pool.query(
      `INSERT INTO server_settings (server_id, never_sleep, exposed, host, suspended, flag)
       SELECT x.s, x.n, ARRAY(SELECT unnest(string_to_array(x.e, ',')::int[]) ORDER BY 1), $4, x.u, x.f
         FROM unnest($1::text[], $2::boolean[], $3::text[], $5::boolean[], $6::text[]) AS x(s, n, e, u, f)
         JOIN placements p ON p.server_id = x.s AND p.host = $4 AND p.lost_at IS NULL
       ON CONFLICT (server_id) DO UPDATE SET never_sleep = EXCLUDED.never_sleep, exposed = EXCLUDED.exposed, host = EXCLUDED.host,
           suspended = EXCLUDED.suspended, flag = EXCLUDED.flag, at = now()
         WHERE (server_settings.never_sleep, server_settings.exposed, server_settings.host, server_settings.suspended, server_settings.flag)
           IS DISTINCT FROM (EXCLUDED.never_sleep, EXCLUDED.exposed, EXCLUDED.host, EXCLUDED.suspended, EXCLUDED.flag)`,
      [
        rows.map((r) => r.serverId),
        rows.map((r) => r.neverSleep),
        rows.map((r) => r.exposed.join(',')),
        this.host,
        rows.map((r) => r.suspended ?? false),
        rows.map((r) => r.flag ?? null),
      ],
    );
  }
}
