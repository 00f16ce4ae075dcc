// Hosts in the registry: each host upserts its own row (where the others reach it, its capacity)
// and renews its lease by heartbeat; every time is the registry's own clock (now()), so hosts
// with skewed clocks agree on who is up. A host whose lease ran out is down. Only the run that
// claimed the name at start (identity.ts) renews it.
// Each host registers its channel certificate's key (schema 14): the owner's side of the channel
// checks a peer by it. Each heartbeat also says when this host last reached each other host over
// the channel (schema 21): a host is dead only when no peer has reached it for recoverAfter.

import { drainOf, type DrainMark } from './drains.js';
import type { RegistryPool } from './pool.js';

export interface HostFacts {
  name: string;
  advertise: string;
  publicIp: string;
  version: string;
  /** What the host can still take (bytes, counts), as it measures it. */
  capacity: Record<string, number>;
  /** How long ago (ms, at this heartbeat) this host last reached each other host over the channel
   *  (schema 21; contact.ts): no host is dead while any peer still reaches it. */
  heard?: Record<string, number>;
}

/** Schema 21: each host's view of the channel, written with its heartbeat (HostFacts.heard). */
export const HEARD_SQL = `ALTER TABLE hosts ADD COLUMN heard jsonb NOT NULL DEFAULT '{}'::jsonb;`;

export interface HostRow extends HostFacts {
  startedAt: Date;
  heartbeatAt: Date;
  leaseUntil: Date;
  /** Lease still running, by the registry's clock. */
  up: boolean;
  /** Milliseconds until the lease runs out (negative: ran out that long ago). */
  leaseLeftMs: number;
  /** Servers placed on this host (placements naming it, not lost). */
  servers: number;
  /** The instance (data dir) holding the name (identity.ts); null: not recorded yet. */
  instance: string | null;
  /** Milliseconds since another host last reached it over the channel, by their heartbeats
   *  (schema 21: `heard`); null: none reported reaching it. */
  reachedMs: number | null;
  /** Its drain (schema 23: no creates, its servers moving to the others), null when it takes creates. */
  drain: DrainMark | null;
}

interface Raw {
  name: string;
  advertise: string;
  public_ip: string;
  version: string;
  capacity: Record<string, number>;
  started_at: Date;
  heartbeat_at: Date;
  lease_until: Date;
  left_ms: string;
  servers: string;
  instance: string | null;
  reached_ms: string | null;
  drain_since: Date | null;
  drain: DrainMark | null;
}

export class HostDirectory {
  constructor(
    private readonly pool: RegistryPool,
    private readonly leaseMs: number,
  ) {}

  /** Renews this host's lease (leaseMs from now) while this run holds its name (identity.ts
   *  claims it at start); false when another run or instance holds the name now (nothing
   *  written). `restarted` sets started_at (the first heartbeat after the registry came back). */
  async renew(f: HostFacts, run: string, restarted = false): Promise<boolean> {
    const r = await this.pool.query(
      `UPDATE hosts SET advertise = $2, public_ip = $3, capacity = $4, version = $5,
         started_at = CASE WHEN $7 THEN now() ELSE started_at END,
         heartbeat_at = now(), lease_until = now() + make_interval(secs => $6::double precision / 1000),
         heard = COALESCE($9::jsonb, heard)
       WHERE name = $1 AND run = $8`,
      [f.name, f.advertise, f.publicIp, JSON.stringify(f.capacity), f.version, this.leaseMs, restarted, run, f.heard ? JSON.stringify(f.heard) : null],
    );
    return r.rowCount === 1;
  }

  /** The public key (SPKI SHA-256, base64) of the channel certificate `name` registered. */
  async setChannelKey(name: string, key: string, run: string): Promise<boolean> {
    // only the run that holds the name registers its key (a copy refused its name must not
    // replace the holder's, which would have every peer refuse the holder)
    const r = await this.pool.query('UPDATE hosts SET channel_key = $2 WHERE name = $1 AND run = $3', [name, key, run]);
    return r.rowCount === 1;
  }

  /** The channel key `name` registered; undefined for a host the registry does not know (or one
   *  that registered none). */
  async channelKey(name: string): Promise<string | undefined> {
    const r = await this.pool.query<{ channel_key: string | null }>('SELECT channel_key FROM hosts WHERE name = $1', [name]);
    return r.rows[0]?.channel_key ?? undefined;
  }

  /** Ends this run's lease at once (a clean stop): it shows down without waiting. */
  async release(name: string, run: string): Promise<void> {
    await this.pool.query('UPDATE hosts SET lease_until = now() WHERE name = $1 AND run = $2', [name, run]);
  }

  async list(): Promise<HostRow[]> {
    const r = await this.pool.query<Raw>(`SELECT h.*, (extract(epoch FROM h.lease_until - now()) * 1000)::bigint AS left_ms,
         (SELECT count(*) FROM placements p WHERE p.host = h.name AND p.lost_at IS NULL) AS servers,
         (SELECT min((extract(epoch FROM now() - o.heartbeat_at) * 1000)::bigint + (o.heard ->> h.name)::bigint)
            FROM hosts o WHERE o.name <> h.name AND o.heard ? h.name) AS reached_ms
       FROM hosts h ORDER BY h.name`);
    return r.rows.map((x) => ({
      name: x.name,
      advertise: x.advertise,
      publicIp: x.public_ip,
      version: x.version,
      capacity: x.capacity,
      startedAt: x.started_at,
      heartbeatAt: x.heartbeat_at,
      leaseUntil: x.lease_until,
      leaseLeftMs: Number(x.left_ms),
      up: Number(x.left_ms) > 0,
      servers: Number(x.servers),
      instance: x.instance,
      reachedMs: x.reached_ms === null ? null : Math.max(0, Number(x.reached_ms)),
      drain: drainOf(x.drain_since, x.drain),
    }));
  }
}
