// What the operator's commands read from the registry (`rootbox status`, `servers list --cluster`,
// `cluster status`): one summary of the registry as this host sees it (reachable, schema, this
// host's lease, hosts up), every placement in the cluster, and server counts per host. Read-only,
// straight from the registry's tables: never a cache, so two hosts asked at once agree.

import { isAppError } from '../errors.js';
import { HostDirectory } from './hosts.js';
import { KNOWN_VERSION, schemaVersion } from './migrations.js';
import type { RegistryPool } from './pool.js';

export interface RegistryFacts {
  /** The registry's URL with the password hidden. */
  registry: string;
  reachable: boolean;
  /** Schema the registry is at (0: never initialised; null: not reachable). */
  schema: number | null;
  schema_of_this_build: number;
  /** This host's name in the cluster. */
  host: string;
  /** This host's lease by the registry's clock: running, lapsed, or none (never registered). */
  lease: 'running' | 'lapsed' | 'none' | null;
  /** Seconds left on this host's lease (negative: lapsed that long ago). */
  lease_left_s: number | null;
  hosts_up: number | null;
  hosts_total: number | null;
  /** Placements in the registry naming this host. */
  servers_here: number | null;
  /** This host's drain (`rootbox cluster drain`): since when, servers moved off, left here, whose
   *  last move failed; null when it is not draining (or the registry was not read). */
  drain: { since: string; moved: number; left: number; failed: number } | null;
  /** Why the registry could not be read (no secrets: the pool's errors carry none). */
  error?: string;
}

/** A placement as the operator's report shows it: the registry's `placements` row, its SQL
 *  columns' names (snake_case), the epoch a number and placed_at an ISO time. */
export interface PlacementRow {
  host: string;
  slug: string;
  server_id: string;
  epoch: number;
  account_id: string;
  public_ip: string;
  placed_at: string;
}

/** The registry as `host` sees it; never throws (an unreachable registry is a fact to show). */
export async function registryFacts(pool: RegistryPool, host: string, leaseMs: number): Promise<RegistryFacts> {
  const base: RegistryFacts = {
    registry: pool.where,
    reachable: false,
    schema: null,
    schema_of_this_build: KNOWN_VERSION,
    host,
    lease: null,
    lease_left_s: null,
    hosts_up: null,
    hosts_total: null,
    servers_here: null,
    drain: null,
  };
  try {
    const schema = await schemaVersion(pool);
    const facts: RegistryFacts = { ...base, reachable: true, schema };
    if (!schema) return facts;
    const hosts = await new HostDirectory(pool, leaseMs).list();
    const me = hosts.find((h) => h.name === host);
    return {
      ...facts,
      lease: me ? (me.up ? 'running' : 'lapsed') : 'none',
      lease_left_s: me ? Math.round(me.leaseLeftMs / 100) / 10 : null,
      hosts_up: hosts.filter((h) => h.up).length,
      hosts_total: hosts.length,
      servers_here: me?.servers ?? 0,
      drain: me?.drain
        ? { since: me.drain.since.toISOString(), moved: me.drain.moved, left: me.servers ?? 0, failed: Object.keys(me.drain.failed).length }
        : null,
    };
  } catch (err) {
    return { ...base, error: isAppError(err) ? err.detail : (err as Error).message };
  }
}

/** Every placement (or those of one account), by host then slug. */
export async function clusterPlacements(pool: RegistryPool, accountId?: string): Promise<PlacementRow[]> {
  const r = await pool.query<Omit<PlacementRow, 'epoch' | 'placed_at'> & { epoch: string; placed_at: Date }>(
    `SELECT host, slug, server_id, epoch, account_id, public_ip, placed_at FROM placements
     WHERE $1::text IS NULL OR account_id = $1 ORDER BY host, slug`,
    [accountId ?? null],
  );
  return r.rows.map((x) => ({ ...x, epoch: Number(x.epoch), placed_at: x.placed_at.toISOString() }));
}

/** How far this machine's clock is from the registry's now(), in ms, and the bound of that
 *  measure (half the round trip). Positive: this machine is ahead. */
export async function clockSkew(pool: RegistryPool, now: () => number = Date.now): Promise<{ skewMs: number; uncertaintyMs: number }> {
  await pool.query('SELECT 1'); // a connection first: the round trip below is one query, not a connect
  const t0 = now();
  const r = await pool.query<{ ms: string }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms');
  const t1 = now();
  return { skewMs: Math.round((t0 + t1) / 2 - Number(r.rows[0].ms)), uncertaintyMs: Math.ceil((t1 - t0) / 2) };
}
