// What this host knows, over time, of its contact with the registry and with every other host
// (issue 38): since when each host's lease has been lapsed (first seen lapsed here, not excused by
// registry trouble: leases.ts), when the channel last reached it, when this host last reached the
// registry (a heartbeat that did counts until the lease it wrote lapses: one hanging on a cut
// connection until its statement times out is no contact after that, the others' clock on this
// host's lease runs from then), and when a peer last did having heard this host (its word, asked over the channel at
// each ping: `registryAgo`; what this host answers a peer is `vouchAgo`). Read on a timer
// (`tick`), which also keeps a session open to every other host (the channel pings it; a peer's
// key is read while the registry answers, so a session can still open once it does not) — except
// a host already dead, tried again only while this host cannot reach the registry. What counts as
// contact, and what is decided on it, is deadhost.ts's; the times are this host's monotonic clock,
// so a host that just started has heard nothing yet and judges nobody dead before `recoverAfter`
// of its own. What a restart must not forget is kept in the data dir (`saved`: the last contact
// by the wall clock, and the peers it had then): a host restarted while cut off counts from that
// contact, not from its start, and still knows it has peers that may have recovered its servers
// meanwhile (selffence.ts).

import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
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
  /** How long ago `host`, answering on the channel now, last reached the registry having heard
   *  this host (its own `vouchAgo` for this host, carried by the channel); undefined: it has not,
   *  or cannot tell. */
  registryAgo?(host: string, advertise: string): number | undefined;
  /** Whether this host's last heartbeat reached the registry. */
  registryUp(): boolean;
  /** When (monotonic ms) the last heartbeat that reached the registry started: the lease it wrote,
   *  as the others see it, runs until about `leaseMs` later. With `leaseMs`, contact ends there
   *  even while the next heartbeat hangs (until its statement times out `registryUp` stays true). */
  registryReachedAt?(): number | undefined;
  /** The lease a heartbeat writes. */
  leaseMs?: number;
  /** Monotonic milliseconds. */
  now(): number;
  recoverAfterMs: number;
  /** What the last run knew (contact.ts's file in the data dir); absent: nothing is kept. */
  saved?: { load(): SavedContact | undefined; save(s: SavedContact): void };
  /** Wall-clock milliseconds (the saved contact outlives this run's monotonic clock). */
  wallNow?(): number;
}

/** When this host last reached the registry or a peer (wall clock) and the peers it had then. */
export interface SavedContact {
  at: number;
  peers: { name: string; advertise: string }[];
}

export class Contact {
  private answers?: (host: string, advertise: string) => boolean;
  private probe?: (host: string, advertise: string) => void;
  private registryAgoOf?: (host: string, advertise: string) => number | undefined;
  private readonly heardAt = new Map<string, number>();
  /** When a peer answering on the channel last reached the registry having heard this host (its word). */
  private viaPeerAt?: number;
  /** When every host that could recover this host's servers last answered it at once (a registry outage everyone sees). */
  private allHeardAt?: number;
  private readonly lapsedSince = new Map<string, number>();
  private registryAt?: number;
  private readonly startedAt: number;
  /** What the last run saved: its last contact on this run's monotonic clock, and its peers. */
  private readonly before?: { at: number; peers: HostView[] };
  private savedAt?: number;
  private savedLast?: number;
  private savedPeers = '';

  constructor(private readonly d: ContactDeps) {
    this.startedAt = d.now();
    this.answers = d.answers;
    this.probe = d.probe;
    this.registryAgoOf = d.registryAgo;
    let s: SavedContact | undefined;
    try {
      s = d.saved?.load();
    } catch {
      s = undefined; // unreadable: as if none
    }
    if (s && Number.isFinite(s.at) && Array.isArray(s.peers)) {
      const wall = this.wallNow();
      this.before = {
        at: this.startedAt - Math.max(0, wall - s.at),
        // peers it had: counted as up (never judged dead from this) until the registry lists the hosts
        peers: s.peers.map((p) => ({ name: p.name, advertise: p.advertise, publicIp: '', up: false, lease: true })),
      };
    }
  }

  /** The hosts the registry lists; while it has listed none in this run, the peers the last run saved. */
  private hosts(): HostView[] {
    const listed = this.d.hosts();
    return listed.length || !this.before ? listed : this.before.peers;
  }

  /** Until when (monotonic ms) the registry counts as reached, as of `now`: `now` while the lease
   *  the last heartbeat that reached it wrote still runs; once it lapsed (the next heartbeat
   *  hanging), when it lapsed — when the others' clock on this host starts; undefined while the
   *  last heartbeat failed. */
  private registryContact(now: number): number | undefined {
    if (!this.d.registryUp()) return undefined;
    const at = this.d.registryReachedAt?.();
    if (at === undefined || this.d.leaseMs === undefined) return now;
    return Math.min(now, at + this.d.leaseMs);
  }

  /** The last contact as this run knows it (the last run's when none yet): this host reaching the
   *  registry, a peer reaching it having heard this host, or every host that could recover this
   *  host answering it at once. */
  private lastContact(): number {
    const own = this.registryAt ?? this.before?.at ?? this.startedAt;
    return Math.max(own, this.viaPeerAt ?? -Infinity, this.allHeardAt ?? -Infinity);
  }

  /** How this host learns whether a peer answers on the channel, opens a session to one, and
   *  hears when it last reached the registry (wired in main.ts once the channel is up). */
  channelBy(
    answers: (host: string, advertise: string) => boolean,
    probe: (host: string, advertise: string) => void,
    registryAgo?: (host: string, advertise: string) => number | undefined,
  ): void {
    this.answers = answers;
    this.probe = probe;
    this.registryAgoOf = registryAgo;
  }

  /** What this host answers `peer` asking, over the channel, when it last reached the registry:
   *  how long ago (ms) it last did while hearing `peer` — so that its heartbeat told the registry
   *  `peer` is reached (hosts.ts `heard`) and nobody counts `peer` dead; undefined: it never did
   *  in this run (the registry away, or `peer` never heard). About: the heartbeat that carried
   *  it may be one tick older than the hearing. */
  vouchAgo(peer: string): number | undefined {
    const heard = this.heardAt.get(peer);
    if (heard === undefined || this.registryAt === undefined) return undefined;
    const now = this.d.now();
    return Math.max(0, now - Math.min(this.registryAt, heard));
  }

  /** Whether every host that could recover this host's servers — every other host whose lease
   *  runs or is excused (it was up when this host last read the registry) — answers it now, and
   *  there is one. */
  private hearsAll(): boolean {
    const others = this.hosts().filter((h) => h.name !== this.d.self && h.lease);
    return others.length > 0 && others.every((h) => this.answers?.(h.name, h.advertise) === true);
  }

  /** Reads the state of every host now, and probes the ones whose answer matters. */
  tick(): void {
    const now = this.d.now();
    const reached = this.registryContact(now);
    if (reached !== undefined) this.registryAt = reached;
    const registryUp = reached === now;
    const seen = new Set<string>();
    for (const h of this.hosts()) {
      if (h.name === this.d.self) continue;
      seen.add(h.name);
      if (h.lease) this.lapsedSince.delete(h.name);
      else if (!this.lapsedSince.has(h.name)) this.lapsedSince.set(h.name, now);
      if (this.answers?.(h.name, h.advertise)) {
        this.heardAt.set(h.name, now);
        const ago = this.registryAgoOf?.(h.name, h.advertise);
        if (ago !== undefined && Number.isFinite(ago) && ago >= 0) this.viaPeerAt = Math.max(this.viaPeerAt ?? -Infinity, now - ago);
      } else if (!registryUp || !verdict(this.of(h.name), this.d.recoverAfterMs).dead) this.probe?.(h.name, h.advertise);
    }
    for (const name of this.lapsedSince.keys()) if (!seen.has(name)) this.lapsedSince.delete(name);
    if (!registryUp && this.hearsAll()) this.allHeardAt = now;
    this.save(now);
  }

  /** Keeps the last contact (lastContact) and the peers for the next run: once it moved, at most
   *  every recoverAfter/8, or at once when the peers changed. */
  private save(now: number): void {
    if (!this.d.saved) return;
    const peers = this.hosts().filter((h) => h.name !== this.d.self && (h.lease || this.heardAt.get(h.name) === now));
    if (this.registryAt === undefined && this.viaPeerAt === undefined && this.allHeardAt === undefined) return; // no contact in this run yet
    const last = this.lastContact();
    if (last <= (this.savedLast ?? -Infinity) && this.registryAt !== now) return;
    const list = JSON.stringify(peers.map((h) => ({ name: h.name, advertise: h.advertise })));
    if (this.savedAt !== undefined && now - this.savedAt < Math.max(1000, this.d.recoverAfterMs / 8) && list === this.savedPeers) return;
    try {
      this.d.saved.save({ at: this.wallNow() - Math.max(0, now - last), peers: JSON.parse(list) as SavedContact['peers'] });
      this.savedLast = last;
      this.savedAt = now;
      this.savedPeers = list;
    } catch {
      // not kept: the next contact tries again
    }
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
    const h = this.hosts().find((x) => x.name === host);
    const answers = h !== undefined && this.answers?.(h.name, h.advertise) === true;
    return {
      leaseLapsedForMs: lapsed === undefined || h?.lease ? undefined : now - lapsed,
      silentForMs: answers ? undefined : now - Math.max(this.heardAt.get(host) ?? this.startedAt, h?.peersHeardAt ?? -Infinity),
    };
  }

  /** How long ago (ms) this host or, by their heartbeats, another reached `host` over the channel
   *  (0: it answers now; `reportedMs`: the registry's own count of the others' reports, when read);
   *  undefined: never in this run. */
  reachedAgo(host: string, reportedMs?: number): number | undefined {
    const now = this.d.now();
    const h = this.hosts().find((x) => x.name === host);
    if (h && this.answers?.(h.name, h.advertise)) return 0;
    const times = [this.heardAt.get(host), h?.peersHeardAt].filter((t): t is number => t !== undefined).map((t) => now - t);
    if (reportedMs !== undefined) times.push(reportedMs);
    return times.length ? Math.max(0, Math.min(...times)) : undefined;
  }

  /** Whether `host` is dead (its servers may be recovered elsewhere), and if not, why. */
  verdict(host: string): Verdict {
    if (host === this.d.self) return { dead: false, why: 'channel' };
    if (!this.hosts().some((h) => h.name === host)) return { dead: false, why: 'lease' };
    return verdict(this.of(host), this.d.recoverAfterMs);
  }

  /** Whether this host's last heartbeat reached the registry. */
  registryUp(): boolean {
    return this.d.registryUp();
  }

  /** Wall-clock milliseconds by the contact's clock (the watchdog's last contact: now less `cutOffForMs`). */
  wallNow(): number {
    return (this.d.wallNow ?? Date.now)();
  }

  /** How long this host has been out of contact (deadhost.ts: what counts as contact); undefined
   *  while it reaches the registry, or every host that could recover it answers it. */
  cutOffForMs(): number | undefined {
    const now = this.d.now();
    const reached = this.registryContact(now);
    if (reached === now || this.hearsAll()) return undefined;
    let last = Math.max(this.lastContact(), reached ?? -Infinity);
    for (const h of this.hosts()) {
      if (h.name === this.d.self || !this.answers?.(h.name, h.advertise)) continue;
      const ago = this.registryAgoOf?.(h.name, h.advertise);
      if (ago !== undefined && Number.isFinite(ago) && ago >= 0) last = Math.max(last, now - ago);
    }
    return Math.max(0, now - last);
  }

  /** Whether another host could recover this host's servers: one whose lease runs or is excused
   *  (it was up when this host last read the registry), or that answered within `recoverAfter`
   *  before this host last reached the registry (fixed while it is cut off: a host cut off for
   *  long does not forget the peers it had and start serving again). */
  knowsPeers(): boolean {
    const since = this.lastContact();
    return this.hosts().some((h) => {
      if (h.name === this.d.self) return false;
      const heard = this.heardAt.get(h.name);
      return h.lease || (heard !== undefined && since - heard < this.d.recoverAfterMs);
    });
  }
}

/** The contact kept in `<dataDir>/cluster-contact.json` (written whole, then renamed into place). */
export function savedContact(dataDir: string): NonNullable<ContactDeps['saved']> {
  const file = join(dataDir, 'cluster-contact.json');
  return {
    load: () => {
      try {
        return JSON.parse(readFileSync(file, 'utf8')) as SavedContact;
      } catch {
        return undefined;
      }
    },
    save: (s) => {
      writeFileSync(`${file}.tmp`, JSON.stringify(s) + '\n', { mode: 0o600 });
      renameSync(`${file}.tmp`, file);
    },
  };
}
