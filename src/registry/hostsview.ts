// The placement cache's view of the hosts (advertise address, public IP, up or down), re-read on
// the cache's timer. A host is down when its lease ran out and the channel to it does not answer
// (`answeredBy`, the channel's view wired in main.ts): a host cut off from the registry alone
// still serves its servers to its peers. A lease runs out at once, between refreshes too (counted
// down on this host's monotonic clock), except one that ran out while this host could not reach
// the registry, or within a lease after it could again (leases.ts: nobody could renew). Each
// host's heartbeat also reports when it last reached each other host over the channel (schema
// 21): the view keeps, for every host, when any other host last did (`peersHeardAt`, contact.ts).

import { Trouble } from './leases.js';
import type { RegistryPool } from './pool.js';

export interface HostView {
  name: string;
  advertise: string;
  publicIp: string;
  up: boolean;
  /** Its lease runs (or ran out in registry trouble and is excused): `up` without the channel's say. */
  lease: boolean;
  /** When another host last reached it over the channel, by their heartbeats (schema 21), on this host's monotonic clock. */
  peersHeardAt?: number;
}

export interface HostsViewOptions {
  /** How often the hosts are re-read (the cache's timer). */
  refreshMs: number;
  connectTimeoutMs: number;
  /** The hosts' lease: how long a lease that ran out in registry trouble is excused after it (default: 3 refreshes). */
  leaseMs?: number;
  /** Monotonic milliseconds. */
  now: () => number;
}

interface HostSeen extends Omit<HostView, 'up' | 'lease'> {
  leftMs: number;
  at: number;
}

export class HostsView {
  private seen = new Map<string, HostSeen>();
  /** Registry trouble as the reads of the hosts saw it, and as this host's heartbeat did. */
  private readonly reads: Trouble;
  private readonly beats: Trouble;
  /** Whether the channel to a host answers now (wired in main.ts; none: the lease alone decides). */
  private answers?: (host: string, advertise: string) => boolean;

  constructor(
    private readonly pool: RegistryPool,
    private readonly o: HostsViewOptions,
  ) {
    const graceMs = o.leaseMs ?? 3 * o.refreshMs;
    this.reads = new Trouble({ graceMs, now: o.now, lateMs: o.refreshMs + o.connectTimeoutMs });
    this.beats = new Trouble({ graceMs, now: o.now });
  }

  /** How this host learns whether the channel to a host answers. */
  answeredBy(answers: (host: string, advertise: string) => boolean): void {
    this.answers = answers;
  }

  /** Whether this host's own heartbeat reached the registry. */
  heartbeat(ok: boolean): void {
    if (ok) this.beats.ok();
    else this.beats.failed();
  }

  host(name: string): HostView | undefined {
    const h = this.seen.get(name);
    if (!h) return undefined;
    // when its lease runs out, on this host's clock; one that ran out in registry trouble is excused
    const lapsedAt = h.at + h.leftMs;
    const lease = this.o.now() < lapsedAt || this.reads.excuses(lapsedAt) || this.beats.excuses(lapsedAt);
    const up = lease || this.answers?.(h.name, h.advertise) === true;
    return { name: h.name, advertise: h.advertise, publicIp: h.publicIp, up, lease, ...(h.peersHeardAt === undefined ? {} : { peersHeardAt: h.peersHeardAt }) };
  }

  /** Every host seen, with its state now. */
  hosts(): HostView[] {
    return [...this.seen.keys()].sort().map((n) => this.host(n)!);
  }

  /** Re-reads the hosts; a failure keeps what was last read (and excuses the leases that run out from now on). */
  async refresh(): Promise<void> {
    try {
      const r = await this.pool.query<{ name: string; advertise: string; public_ip: string; left_ms: string; beat_ms: string; heard: Record<string, number> }>(
        `SELECT name, advertise, public_ip, (extract(epoch FROM lease_until - now()) * 1000)::bigint AS left_ms,
           (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint AS beat_ms, heard FROM hosts`,
      );
      const at = this.o.now();
      // when another host last reached each one: its heartbeat's age plus how long before it it had
      const ago = new Map<string, number>();
      for (const p of r.rows)
        for (const [name, ms] of Object.entries(p.heard ?? {}))
          if (name !== p.name && Number.isFinite(ms)) ago.set(name, Math.min(ago.get(name) ?? Infinity, Math.max(0, Number(p.beat_ms)) + ms));
      this.seen = new Map(
        r.rows.map((x) => {
          const peers = ago.get(x.name);
          return [
            x.name,
            {
              name: x.name,
              advertise: x.advertise,
              publicIp: x.public_ip,
              leftMs: Number(x.left_ms),
              at,
              peersHeardAt: peers === undefined ? undefined : at - peers,
            },
          ];
        }),
      );
      this.reads.ok();
    } catch {
      this.reads.failed();
    }
  }
}
