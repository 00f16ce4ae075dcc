// A server's settings that live neither in its disk nor in another registry record (issue 38:
// what a recovery brings back without the dead host's store): never_sleep and the container ports
// it exposes (their public ports are each host's own, re-allocated where it runs). One row per
// server, written by the host the registry places it on whenever one of them changes (create,
// /expose, DELETE /expose, a start's reconcile) — so a change after the server's newest checkpoint
// is not lost, as it would be in the checkpoint's manifest. A host writes only rows of servers
// placed on it (the placement read in the same statement), so a host that lost a server to a move
// or a recovery cannot overwrite what its new owner wrote. The row goes with the placement
// (a foreign key: deleted with it on every path). Schema 25; schema 29 added the server's suspension
// (suspended, and the flag that says whose: an operator's suspension outlasts a recovery on another host).

import { HOLDS, type NameHolder } from './names.js';
import type { RegistryPool } from './pool.js';

/** Schema 25: never_sleep and the exposed container ports of every server. */
export const SETTINGS_SQL = `
  CREATE TABLE server_settings (
    server_id    text PRIMARY KEY REFERENCES placements (server_id) ON DELETE CASCADE,
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
  /** `holder`: this host's instance and run (a daemon's Registry gives its identity), as names.ts checks them. */
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
    private readonly holder: NameHolder = { instance: `ins_${host}`, held: true },
  ) {}

  /** Writes the rows of servers the registry places on this host, on this instance, while this run
   *  holds the host's name (names.remove's condition); others are left alone; an unchanged row writes
   *  nothing. The placements are read FOR SHARE in the same transaction: a move or recovery that
   *  changes one meanwhile waits for this write, or this write sees its new host and skips the row. */
  async put(rows: readonly ServerSettingsRow[]): Promise<void> {
    if (!rows.length) return;
    await this.pool.tx(async (c) => {
      const mine = await c.query<{ server_id: string }>(
        `SELECT server_id FROM placements
          WHERE server_id = ANY($1::text[]) AND host = $2 AND instance = $3 AND lost_at IS NULL AND ${HOLDS('$2', '$4')}
          ORDER BY server_id FOR SHARE`,
        [rows.map((r) => r.serverId), this.host, this.holder.instance, this.holder.run ?? null],
      );
      const here = new Set(mine.rows.map((r) => r.server_id));
      const put = rows.filter((r) => here.has(r.serverId));
      if (!put.length) return;
      await c.query(
        `INSERT INTO server_settings (server_id, never_sleep, exposed, host, suspended, flag)
         SELECT x.s, x.n, ARRAY(SELECT unnest(string_to_array(x.e, ',')::int[]) ORDER BY 1), $4, x.u, x.f
           FROM unnest($1::text[], $2::boolean[], $3::text[], $5::boolean[], $6::text[]) AS x(s, n, e, u, f)
         ON CONFLICT (server_id) DO UPDATE SET never_sleep = EXCLUDED.never_sleep, exposed = EXCLUDED.exposed, host = EXCLUDED.host,
             suspended = EXCLUDED.suspended, flag = EXCLUDED.flag, at = now()
           WHERE (server_settings.never_sleep, server_settings.exposed, server_settings.host, server_settings.suspended, server_settings.flag)
             IS DISTINCT FROM (EXCLUDED.never_sleep, EXCLUDED.exposed, EXCLUDED.host, EXCLUDED.suspended, EXCLUDED.flag)`,
        [
          put.map((r) => r.serverId),
          put.map((r) => r.neverSleep),
          put.map((r) => r.exposed.join(',')),
          this.host,
          put.map((r) => r.suspended ?? false),
          put.map((r) => r.flag ?? null),
        ],
      );
    });
  }
}
