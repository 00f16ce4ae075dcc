// What this host knows, over time, of its contact with the registry and with every other host
// (issue 38): since when each host's lease has been lapsed (first seen lapsed here, not excused by
// registry trouble: leases.ts), when the channel last reached it, and when this host last reached
// the registry. Read on a timer (`tick`), which also keeps a session open to every other host
// (the channel pings it; a peer's key is read while the registry answers, so a session can still
// open once it does not: is it a registry outage everyone sees, or a partition of this host?) —
// except a host already dead, tried again only while this host cannot reach the registry. The decisions on these times are deadhost.ts's; the times are this
// host's monotonic clock, so a host that just started has heard nothing yet and judges nobody
// dead before `recoverAfter` of its own.

import { verdict, type HostContact, type Verdict } from './deadhost.js';
import type { HostView } from './hostsview.js';

export interface ContactDeps {
  /** This host's name (not a peer). */
  self: string;
  /** The hosts the registry listed, with their state now (the placement cache's hosts view). */
  hosts(): HostView[];
  /** Whether `host` at `advertise` answers on the channel now (none: no channel, nobody answers). */
  answers?(host: string, advertise: string): boolean;
  /** Opens a session to `host` in the background (the channel's probe). */
  probe?(host: string, advertise: string): void;
  /** Whether this host's last heartbeat reached the registry. */
  registryUp(): boolean;
  /** Monotonic milliseconds. */
  now(): number;
  recoverAfterMs: number;
}

export class Contact {
  private answers?: (host: string, advertise: string) => boolean;
  private probe?: (host: string, advertise: string) => void;
  private readonly heardAt = new Map<string, number>();
  private readonly lapsedSince = new Map<string, number>();
  private registryAt?: number;
  private readonly startedAt: number;

  constructor(private readonly d: ContactDeps) {
    this.startedAt = d.now();
    this.answers = d.answers;
    this.probe = d.probe;
  }

  /** How this host learns whether a peer answers on the channel, and opens a session to one (wired in main.ts once the channel is up). */
  channelBy(answers: (host: string, advertise: string) => boolean, probe: (host: string, advertise: string) => void): void {
    this.answers = answers;
    this.probe = probe;
  }

  /** Reads the state of every host now, and probes the ones whose answer matters. */
  tick(): void {
    const now = this.d.now();
    const registryUp = this.d.registryUp();
    if (registryUp) this.registryAt = now;
    const seen = new Set<string>();
    for (const h of this.d.hosts()) {
      if (h.name === this.d.self) continue;
      seen.add(h.name);
      if (h.lease) this.lapsedSince.delete(h.name);
      else if (!this.lapsedSince.has(h.name)) this.lapsedSince.set(h.name, now);
      if (this.answers?.(h.name, h.advertise)) this.heardAt.set(h.name, now);
      else if (!registryUp || !verdict(this.of(h.name), this.d.recoverAfterMs).dead) this.probe?.(h.name, h.advertise);
    }
    for (const name of this.lapsedSince.keys()) if (!seen.has(name)) this.lapsedSince.delete(name);
  }

  /** How long ago (ms) this host last reached each other host over the channel (its heartbeat
   *  writes it: hosts.ts `heard`); a host never reached is not listed. */
  heardAgo(): Record<string, number> {
    const now = this.d.now();
    return Object.fromEntries([...this.heardAt].map(([h, at]) => [h, Math.max(0, Math.round(now - at))]));
  }

  /** What this host knows of `host` now (deadhost.ts's input): silent since neither this host nor,
   *  by their heartbeats, any other host reached it over the channel. */
  of(host: string): HostContact {
    const now = this.d.now();
    const lapsed = this.lapsedSince.get(host);
    const h = this.d.hosts().find((x) => x.name === host);
    const answers = h !== undefined && this.answers?.(h.name, h.advertise) === true;
    return {
      leaseLapsedForMs: lapsed === undefined || h?.lease ? undefined : now - lapsed,
      silentForMs: answers ? undefined : now - Math.max(this.heardAt.get(host) ?? this.startedAt, h?.peersHeardAt ?? -Infinity),
    };
  }

  /** Whether `host` is dead (its servers may be recovered elsewhere), and if not, why. */
  verdict(host: string): Verdict {
    if (host === this.d.self) return { dead: false, why: 'channel' };
    if (!this.d.hosts().some((h) => h.name === host)) return { dead: false, why: 'lease' };
    return verdict(this.of(host), this.d.recoverAfterMs);
  }

  /** How long this host has reached neither the registry nor any peer; undefined while it reaches one. */
  cutOffForMs(): number | undefined {
    const now = this.d.now();
    if (this.d.registryUp()) return undefined;
    let last = this.registryAt ?? this.startedAt;
    for (const h of this.d.hosts()) {
      if (h.name === this.d.self) continue;
      if (this.answers?.(h.name, h.advertise)) return undefined;
      last = Math.max(last, this.heardAt.get(h.name) ?? last);
    }
    return now - last;
  }

  /** Whether another host could recover this host's servers: one whose lease runs or is excused
   *  (it was up when this host last read the registry), or that answered within `recoverAfter`
   *  before this host last reached the registry (fixed while it is cut off: a host cut off for
   *  long does not forget the peers it had and start serving again). */
  knowsPeers(): boolean {
    const since = this.registryAt ?? this.startedAt;
    return this.d.hosts().some((h) => {
      if (h.name === this.d.self) return false;
      const heard = this.heardAt.get(h.name);
      return h.lease || (heard !== undefined && since - heard < this.d.recoverAfterMs);
    });
  }
}
