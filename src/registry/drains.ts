// A host's drain mark (issue 38 item 2, schema 23): kept in its `hosts` row so a drain survives a
// restart of any host. `rootbox cluster drain HOST` sets `drain_since` (the host takes no creates,
// its daemon moves every server off it: moves/drain.ts) and starts a fresh progress record unless
// one runs already; `cluster undrain` clears both. The draining host writes its progress there
// (servers moved, and each one that failed with why and how often), which `cluster status` reads
// from any host; what is left is the count of placements still naming it.

import type { RegistryPool } from './pool.js';

export const DRAIN_SQL = `
  ALTER TABLE hosts ADD COLUMN IF NOT EXISTS drain_since timestamptz;
  ALTER TABLE hosts ADD COLUMN IF NOT EXISTS drain jsonb;`;

/** A server the drain could not move yet (it is tried again). */
export interface DrainFailure {
  why: string;
  /** ISO time of the last failure. */
  at: string;
  attempts: number;
}

/** A host's drain as its row holds it. */
export interface DrainMark {
  since: Date;
  /** Servers moved off the host since the drain began. */
  moved: number;
  /** Server id → its last failure (removed once it moved). */
  failed: Record<string, DrainFailure>;
}

/** The drain of a row (`drain_since`, `drain`), or null when the host is not draining. */
export function drainOf(since: Date | null, drain: { moved?: number; failed?: Record<string, DrainFailure> } | null): DrainMark | null {
  if (!since) return null;
  return { since, moved: drain?.moved ?? 0, failed: drain?.failed ?? {} };
}

export class HostDrains {
  constructor(private readonly pool: RegistryPool) {}

  /** Marks `host` draining; false when the registry has no such host. A drain under way keeps its progress. */
  async mark(host: string): Promise<boolean> {
    const r = await this.pool.query(
      `UPDATE hosts SET drain = CASE WHEN drain_since IS NULL THEN '{"moved":0,"failed":{}}'::jsonb ELSE drain END,
         drain_since = coalesce(drain_since, now()) WHERE name = $1`,
      [host],
    );
    return r.rowCount === 1;
  }

  /** Reopens `host` to creates (its drain ends; moves under way finish); false when there is no such host. */
  async clear(host: string): Promise<boolean> {
    const r = await this.pool.query('UPDATE hosts SET drain_since = NULL, drain = NULL WHERE name = $1', [host]);
    return r.rowCount === 1;
  }

  /** `host`'s drain now, or null when it is not draining (or unknown). */
  async of(host: string): Promise<DrainMark | null> {
    const r = await this.pool.query<{ drain_since: Date | null; drain: DrainMark | null }>('SELECT drain_since, drain FROM hosts WHERE name = $1', [host]);
    const x = r.rows[0];
    return x ? drainOf(x.drain_since, x.drain) : null;
  }

  /** One more server moved off `host` (its failure, if any, forgotten); nothing when the drain ended. */
  async moved(host: string, server: string): Promise<void> {
    await this.pool.query(
      `UPDATE hosts SET drain = jsonb_set(drain, '{moved}', to_jsonb(coalesce((drain->>'moved')::int, 0) + 1)) #- ARRAY['failed', $2::text]
       WHERE name = $1 AND drain_since IS NOT NULL`,
      [host, server],
    );
  }

  /** Forgets the failures of servers `host` no longer has (deleted by their owner meanwhile). */
  async forget(host: string, servers: string[]): Promise<void> {
    if (!servers.length) return;
    await this.pool.query(`UPDATE hosts SET drain = jsonb_set(drain, '{failed}', (drain->'failed') - $2::text[]) WHERE name = $1 AND drain ? 'failed'`, [
      host,
      servers,
    ]);
  }

  /** A server of `host`'s drain that did not move (why; its attempts counted); nothing when the drain ended. */
  async failed(host: string, server: string, why: string): Promise<void> {
    await this.pool.query(
      `UPDATE hosts SET drain = jsonb_set(coalesce(drain, '{}'::jsonb) || jsonb_build_object('failed', coalesce(drain->'failed', '{}'::jsonb)),
         ARRAY['failed', $2::text],
         jsonb_build_object('why', $3::text, 'at', now(), 'attempts', coalesce((drain->'failed'->$2->>'attempts')::int, 0) + 1))
       WHERE name = $1 AND drain_since IS NOT NULL`,
      [host, server, why.slice(0, 500)],
    );
  }
}
