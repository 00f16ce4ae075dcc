// The placement cache (issue 29 item 3): every host keeps the registry's placements in memory so
// the edge answers "which host runs <slug>" synchronously, following the change feed (feed.ts):
// loaded whole at start, then LISTEN (listener.ts) and, after any reconnect, a catch-up
// `version > seen` (NOTIFY has no replay). Every notification, `fresh()` and the timer run the
// same ordered catch-up, one at a time, so the cache never goes back in version. It may be stale,
// never trusted for a wrong answer: the owner checks the epoch and answers "not here", then the
// edge calls `fresh()`. The same timer refreshes its view of the hosts (hostsview.ts: up or down).
//
// The one catch-up fills every map a host keeps, each taking its own kinds of change: the
// placements (placementmap.ts), the custom domains (`domains`, domainmap.ts: the edge routes any
// of them without asking the registry), the servers' SSH keys, the HTTP-01 answers of the orders
// under way and every account's api-key hash (`keys`, `challenges`, `accountKeys`: sharedmaps.ts;
// a login, a CA's request or an api key another host wrote is answered from memory).
//
// Tombstones do not pile up (tombstones.ts): a full load reads none; the host records the version
// it caught up to, and tombstones every live host passed are pruned, raising the registry's floor.
// A cache behind the floor (a host that was away, or slower than the retention) may have missed a
// delete, so it reloads everything instead: every map emptied and filled again from that one
// snapshot, in one turn of the event loop.

import type { Logger } from '../log/index.js';
import { DomainMap } from './domainmap.js';
import { readFeed } from './feed.js';
import { HostsView, type HostView } from './hostsview.js';
import { FeedListener } from './listener.js';
import { PlacementMap, type CachedPlacement } from './placementmap.js';
import { AccountKeyMap, ChallengeMap, KeyMap } from './sharedmaps.js';
import { Tombstones } from './tombstones.js';
import type { RegistryPool } from './pool.js';

export type { CachedPlacement } from './placementmap.js';
export type { HostView } from './hostsview.js';

export interface PlacementCacheOptions {
  /** How often the hosts view is re-read (and a catch-up runs as a safety net). */
  refreshMs: number;
  /** First wait before re-opening a lost LISTEN connection (doubles up to 8×). */
  reconnectMs?: number;
  connectTimeoutMs: number;
  /** The hosts' lease: how long a lease that ran out in registry trouble is excused after it (default: 3 refreshes). */
  leaseMs?: number;
  /** Monotonic milliseconds (injected in tests). */
  now?: () => number;
  /** This host's name: its hosts row records the version the cache caught up to (unset: not recorded). */
  host?: string;
  /** How long a tombstone some live host has not caught up past is kept (default 7 days). */
  tombstoneRetentionMs?: number;
  /** How often this host prunes tombstones (default 10 minutes; 0: never, tests call `prune`). */
  pruneEveryMs?: number;
}

export class PlacementCache {
  private readonly placed = new PlacementMap();
  private readonly view: HostsView;
  private readonly listener: FeedListener;
  private readonly tombstones: Tombstones;
  private seen = 0;
  private timer?: NodeJS.Timeout;
  private syncing?: Promise<void>;
  private again?: Promise<void>;
  private readonly now: () => number;
  /** Full loads after the first (the cache was behind the tombstone floor); for tests and status. */
  reloads = 0;
  private filled = false;
  /** The cluster's custom domains, filled by the same catch-up. */
  readonly domains = new DomainMap();
  /** The cluster's servers' SSH public keys, filled by the same catch-up. */
  readonly keys = new KeyMap();
  /** The HTTP-01 answers every host's orders wrote, filled by the same catch-up. */
  readonly challenges = new ChallengeMap();
  /** Every account's current api-key hash, filled by the same catch-up. */
  readonly accountKeys = new AccountKeyMap();

  constructor(
    private readonly pool: RegistryPool,
    private readonly o: PlacementCacheOptions,
    private readonly log?: Logger,
  ) {
    this.now = o.now ?? (() => performance.now());
    this.tombstones = new Tombstones(pool, { host: o.host, retentionMs: o.tombstoneRetentionMs, everyMs: o.pruneEveryMs, now: this.now }, log);
    this.view = new HostsView(pool, { refreshMs: o.refreshMs, connectTimeoutMs: o.connectTimeoutMs, leaseMs: o.leaseMs, now: this.now });
    this.listener = new FeedListener(
      pool,
      {
        reconnectMs: o.reconnectMs,
        connectTimeoutMs: o.connectTimeoutMs,
        // every kind of the feed is some map's here
        onChange: (version) => {
          if (version > this.seen) void this.sync().catch(() => {});
        },
        // whatever committed while no connection listened
        onOpen: () => this.sync().catch(() => {}),
      },
      log,
    );
  }

  /** How this host learns whether the channel to a host answers: a host whose lease ran out is
   *  still up while it does (main.ts gives the channel's). */
  answeredBy(answers: (host: string, advertise: string) => boolean): void {
    this.view.answeredBy(answers);
  }

  /** Whether this host's own heartbeat reached the registry (Registry tells at each one): while
   *  it fails, and a lease after, leases that ran out meanwhile are not counted. */
  heartbeat(ok: boolean): void {
    this.view.heartbeat(ok);
  }

  /** Whether a catch-up filled the maps at least once (before, they know nothing). */
  get loaded(): boolean {
    return this.filled;
  }

  /** Highest version of the feed seen. */
  get version(): number {
    return this.seen;
  }

  /** Whether the LISTEN connection is open now (changes arrive as they commit). */
  get listening(): boolean {
    return this.listener.listening;
  }

  /** How many times the LISTEN connection was (re)opened; for tests and status. */
  get listens(): number {
    return this.listener.listens;
  }

  /** Loads everything, LISTENs, and starts the hosts timer. A registry that cannot be reached
   *  now is not an error: the cache fills as soon as it answers. */
  async start(): Promise<void> {
    await this.listener.start();
    await Promise.all([this.sync(), this.view.refresh()]).catch(() => {});
    this.timer = setInterval(() => void this.tick(), this.o.refreshMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.listener.stop();
    await this.syncing?.catch(() => {});
    await this.again?.catch(() => {});
  }

  bySlug(slug: string): CachedPlacement | undefined {
    return this.placed.bySlug(slug);
  }

  byServer(id: string): CachedPlacement | undefined {
    return this.placed.byServer(id);
  }

  /** One catch-up read from the registry (started after this call), then the cache's answer:
   *  what the edge calls after an owner answered "not here". Throws registry_unavailable. */
  async fresh(slug: string): Promise<CachedPlacement | undefined> {
    await this.sync();
    return this.placed.bySlug(slug);
  }

  /** The placement of the server an active custom domain routes to (any host's). */
  domain(name: string): CachedPlacement | undefined {
    const id = this.domains.activeServer(name);
    return id === undefined ? undefined : this.placed.byServer(id);
  }

  /** `domain()` after one catch-up read (after an owner answered "not here" for it). */
  async freshDomain(name: string): Promise<CachedPlacement | undefined> {
    await this.sync();
    return this.domain(name);
  }

  /** The servers of an account, wherever they are placed (from the cache). */
  ofAccount(accountId: string): CachedPlacement[] {
    return this.placed.ofAccount(accountId);
  }

  host(name: string): HostView | undefined {
    return this.view.host(name);
  }

  /** Every host seen, with its state now. */
  hosts(): HostView[] {
    return this.view.hosts();
  }

  /** Servers placed on each host, by host name (from the cache). */
  countsByHost(): Map<string, number> {
    return this.placed.countsByHost();
  }

  /** The state the registry shows for a server: `unavailable` when its host is down (lease ran
   *  out, channel not answering), undefined when its host is up or the server is unknown (the
   *  owner's own state holds). */
  state(serverId: string): 'unavailable' | undefined {
    const p = this.placed.byServer(serverId);
    if (!p) return undefined;
    return this.host(p.host)?.up === false ? 'unavailable' : undefined;
  }

  /** Runs one catch-up `version > seen`, after any in flight: each call is answered by a read
   *  that started after it. */
  sync(): Promise<void> {
    if (!this.syncing) {
      this.syncing = this.catchUp().finally(() => (this.syncing = undefined));
      return this.syncing;
    }
    this.again ??= this.syncing
      .catch(() => {})
      .then(() => {
        this.again = undefined;
        return this.sync();
      });
    return this.again;
  }

  /** Reads what changed since `seen` and applies it; a cache behind the tombstone floor (or empty)
   *  is loaded whole instead. */
  private async catchUp(full = this.seen === 0): Promise<void> {
    const r = await readFeed(this.pool, this.seen, full);
    if (!full && r.floor > this.seen) {
      // tombstones this cache has not seen were pruned: some delete may be missed, reload
      this.reloads++;
      this.log?.info('placements: behind the pruned tombstones; loading everything again', { seen: this.seen, floor: r.floor });
      return this.catchUp(true);
    }
    if (full) {
      this.placed.clear();
      this.domains.clear();
      this.keys.clear();
      this.challenges.clear();
      this.accountKeys.clear();
    }
    if (r.skipped) this.log?.warn('placements: changes of a kind this host does not know, or that do not fit it, skipped', { skipped: r.skipped });
    const maps = [this.placed, this.domains, this.keys, this.challenges, this.accountKeys];
    for (const c of r.changes) maps.some((m) => m.take(c));
    // versions commit in order: the snapshot holds every version up to its highest, and this read
    // has every change above `seen` of it (a full load: every live record)
    this.seen = Math.max(this.seen, r.top);
    this.filled = true;
    this.domains.settle();
  }

  /** Records in this host's row the version the cache caught up to (what the prune may count on). */
  async record(): Promise<void> {
    await this.tombstones.record(this.seen);
  }

  /** Prunes the tombstones every live host caught up past, and those older than the retention
   *  (feed.ts); answers how many. Any host may run it at any time. */
  prune(): Promise<number> {
    return this.tombstones.prune();
  }

  private async tick(): Promise<void> {
    await this.view.refresh();
    await this.sync().catch(() => {});
    await this.record().catch(() => {});
    void this.tombstones.pruneNow();
    this.listener.ensure();
  }
}
