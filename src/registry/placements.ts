// The placement cache (issue 29 item 3): every host keeps the registry's placements in memory so
// the edge answers "which host runs <slug>" synchronously. It loads everything at start, LISTENs
// on a dedicated connection for the schema-7 notifications, and after any reconnect (the LISTEN
// connection killed, the registry restarted or failed over) catches up with `version > seen`
// (NOTIFY has no replay). Every notification, `fresh()` and the hosts timer run the same ordered
// catch-up, one at a time, so the cache never goes back in version. It also keeps a view of the
// hosts (advertise address, public IP) refreshed on a short timer. A host is down when its lease
// ran out and the channel to it does not answer (`answeredBy`, the channel's view wired in
// main.ts): a host cut off from the registry alone still serves its servers to its peers. A lease
// runs out at once, between refreshes too (counted down on this host's monotonic clock), except
// one that ran out while this host could not reach the registry, or within a lease after it could
// again (leases.ts: nobody could renew). The cache may be stale, never trusted for a wrong answer:
// the owner checks the epoch and answers "not here", then the edge calls `fresh()`. The same catch-up
// keeps the cluster's custom domains (`domains`, domainmap.ts): every host knows every active
// domain → server, so its edge routes any of them without asking the registry; and the servers'
// SSH public keys and the HTTP-01 answers of the orders under way (`keys`, `challenges`:
// sharedmaps.ts), so a login with a key this host does not run, or the CA asking this host for a
// token another host wrote, is answered from memory; and every account's api-key hash
// (`accountKeys`, sharedmaps.ts), so an api key no account has costs no registry read beyond the
// per-source budget (hosting's directory.ts).
//
// Tombstones do not pile up (schema 16): a full load (the start, `seen` 0) reads the rows only,
// no tombstone; after each catch-up the host records in its hosts row the version it caught up
// to, and every host now and then prunes the tombstones every live host has caught up past (and
// those older than the retention), raising the registry's tombstone floor (placements-sql.ts).
// The catch-up reads the floor in the same statement: a cache behind it (a host that was away,
// or slower than the retention) may have missed a delete, so it reloads everything instead —
// every map emptied and filled again from that one snapshot, in one turn of the event loop.

import pg from 'pg';
import type { Logger } from '../log/index.js';
import { DomainMap, DOMAINS_CATCH_UP } from './domainmap.js';
import { Trouble } from './leases.js';
import { ACCOUNT_KEYS_CATCH_UP, AccountKeyMap, ChallengeMap, KeyMap, SHARED_MAPS_CATCH_UP } from './sharedmaps.js';
import { PLACEMENT_CHANNEL, PRUNE_TOMBSTONES } from './placements-sql.js';
import type { Placement } from './names.js';
import type { RegistryPool } from './pool.js';

/** A placement as the cache holds it: the record (names.ts) and the version it was written at. */
export interface CachedPlacement extends Placement {
  version: number;
}
export interface HostView {
  name: string;
  advertise: string;
  publicIp: string;
  up: boolean;
}

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

interface Row {
  /** p placement, t its tombstone, d custom domain (slug = domain, host = state), x its tombstone,
   *  k a server's SSH key (slug = fingerprint, public_ip = key line), y its tombstone,
   *  c an HTTP-01 answer (server_id = token, slug = key authorization, epoch = expiry ms), z its tombstone,
   *  a an account's api-key hash (server_id = account id, slug = hash), b its tombstone,
   *  f the tombstone floor (epoch = the floor, version = the highest version any tombstone had) */
  kind: 'p' | 't' | 'd' | 'x' | 'k' | 'y' | 'c' | 'z' | 'a' | 'b' | 'f';
  server_id: string;
  slug: string | null;
  host: string | null;
  epoch: string | null;
  account_id: string | null;
  public_ip: string | null;
  version: string;
}

/** Rows above $1, tombstones above $2 (a full load: 0 and NO_TOMBSTONES), and the floor. */
const CATCH_UP = `
  SELECT 'p' AS kind, server_id, slug, host, epoch, account_id, public_ip, version FROM placements WHERE version > $1
  UNION ALL
  SELECT 't', key, NULL, NULL, NULL, NULL, NULL, version FROM placement_tombstones WHERE kind = 'p' AND version > $2
  UNION ALL${DOMAINS_CATCH_UP}
  UNION ALL${SHARED_MAPS_CATCH_UP}
  UNION ALL${ACCOUNT_KEYS_CATCH_UP}
  UNION ALL
  SELECT 'f', '', NULL, NULL, f.version, NULL, NULL, greatest(f.version, (SELECT coalesce(max(version), 0) FROM placement_tombstones)) FROM tombstone_floor f
  ORDER BY version`;
/** Above every version: a full load reads no tombstone. */
const NO_TOMBSTONES = '9223372036854775807';
const DAY = 24 * 3600_000;

/** The notifications a catch-up follows: placements, custom domains, SSH keys, HTTP-01 answers, accounts' keys. */
const FOLLOWED = new Set(['p:', 'd:', 'k:', 'c:', 'a:']);

interface HostSeen extends Omit<HostView, 'up'> {
  leftMs: number;
  at: number;
}

export class PlacementCache {
  private readonly servers = new Map<string, CachedPlacement>();
  private readonly slugs = new Map<string, CachedPlacement>();
  private hostsSeen = new Map<string, HostSeen>();
  /** Registry trouble as the reads of the hosts saw it, and as this host's heartbeat did. */
  private readonly reads: Trouble;
  private readonly beats: Trouble;
  /** Whether the channel to a host answers now (wired in main.ts; none: the lease alone decides). */
  private answers?: (host: string, advertise: string) => boolean;
  private seen = 0;
  private listener?: pg.Client;
  private running = false;
  private timer?: NodeJS.Timeout;
  private retry?: NodeJS.Timeout;
  private backoff: number;
  private syncing?: Promise<void>;
  private again?: Promise<void>;
  private readonly now: () => number;
  /** How many times the LISTEN connection was (re)opened; for tests and status. */
  listens = 0;
  /** Full loads after the first (the cache was behind the tombstone floor); for tests and status. */
  reloads = 0;
  /** The version last recorded in this host's row. */
  private recorded = 0;
  private lastPrune: number;
  private pruning = false;
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
    this.backoff = o.reconnectMs ?? 200;
    this.lastPrune = this.now();
    const graceMs = o.leaseMs ?? 3 * o.refreshMs;
    this.reads = new Trouble({ graceMs, now: this.now, lateMs: o.refreshMs + o.connectTimeoutMs });
    this.beats = new Trouble({ graceMs, now: this.now });
  }

  /** How this host learns whether the channel to a host answers: a host whose lease ran out is
   *  still up while it does (main.ts gives the channel's). */
  answeredBy(answers: (host: string, advertise: string) => boolean): void {
    this.answers = answers;
  }

  /** Whether this host's own heartbeat reached the registry (Registry tells at each one): while
   *  it fails, and a lease after, leases that ran out meanwhile are not counted. */
  heartbeat(ok: boolean): void {
    if (ok) this.beats.ok();
    else this.beats.failed();
  }

  /** Whether a catch-up filled the maps at least once (before, they know nothing). */
  get loaded(): boolean {
    return this.filled;
  }

  /** Highest placement version seen. */
  get version(): number {
    return this.seen;
  }

  /** Whether the LISTEN connection is open now (changes arrive as they commit). */
  get listening(): boolean {
    return this.listener !== undefined;
  }

  /** Loads everything, LISTENs, and starts the hosts timer. A registry that cannot be reached
   *  now is not an error: the cache fills as soon as it answers. */
  async start(): Promise<void> {
    this.running = true;
    await this.listen();
    await Promise.all([this.sync(), this.refreshHosts()]).catch(() => {});
    this.timer = setInterval(() => void this.tick(), this.o.refreshMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.timer);
    clearTimeout(this.retry);
    const l = this.listener;
    this.listener = undefined;
    await l?.end().catch(() => {});
    await this.syncing?.catch(() => {});
    await this.again?.catch(() => {});
  }

  bySlug(slug: string): CachedPlacement | undefined {
    return this.slugs.get(slug);
  }

  byServer(id: string): CachedPlacement | undefined {
    return this.servers.get(id);
  }

  /** One catch-up read from the registry (started after this call), then the cache's answer:
   *  what the edge calls after an owner answered "not here". Throws registry_unavailable. */
  async fresh(slug: string): Promise<CachedPlacement | undefined> {
    await this.sync();
    return this.slugs.get(slug);
  }

  /** The placement of the server an active custom domain routes to (any host's). */
  domain(name: string): CachedPlacement | undefined {
    const id = this.domains.activeServer(name);
    return id === undefined ? undefined : this.servers.get(id);
  }

  /** `domain()` after one catch-up read (after an owner answered "not here" for it). */
  async freshDomain(name: string): Promise<CachedPlacement | undefined> {
    await this.sync();
    return this.domain(name);
  }

  /** The servers of an account, wherever they are placed (from the cache). */
  ofAccount(accountId: string): CachedPlacement[] {
    return [...this.servers.values()].filter((p) => p.accountId === accountId);
  }

  host(name: string): HostView | undefined {
    const h = this.hostsSeen.get(name);
    if (!h) return undefined;
    // when its lease runs out, on this host's clock; one that ran out in registry trouble is excused
    const lapsedAt = h.at + h.leftMs;
    const lease = this.now() < lapsedAt || this.reads.excuses(lapsedAt) || this.beats.excuses(lapsedAt);
    const up = lease || this.answers?.(h.name, h.advertise) === true;
    return { name: h.name, advertise: h.advertise, publicIp: h.publicIp, up };
  }

  /** Every host seen, with its state now. */
  hosts(): HostView[] {
    return [...this.hostsSeen.keys()].sort().map((n) => this.host(n)!);
  }

  /** Servers placed on each host, by host name (from the cache). */
  countsByHost(): Map<string, number> {
    const m = new Map<string, number>();
    for (const p of this.servers.values()) m.set(p.host, (m.get(p.host) ?? 0) + 1);
    return m;
  }

  /** The state the registry shows for a server: `unavailable` when its host is down (lease ran
   *  out, channel not answering), undefined when its host is up or the server is unknown (the
   *  owner's own state holds). */
  state(serverId: string): 'unavailable' | undefined {
    const p = this.servers.get(serverId);
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
    const r = await this.pool.query<Row>(CATCH_UP, full ? [0, NO_TOMBSTONES] : [this.seen, this.seen]);
    const floor = r.rows.find((x) => x.kind === 'f');
    if (!full && floor && Number(floor.epoch) > this.seen) {
      // tombstones this cache has not seen were pruned: some delete may be missed, reload
      this.reloads++;
      this.log?.info('placements: behind the pruned tombstones; loading everything again', { seen: this.seen, floor: Number(floor.epoch) });
      return this.catchUp(true);
    }
    if (full) {
      this.servers.clear();
      this.slugs.clear();
      this.domains.clear();
      this.keys.clear();
      this.challenges.clear();
      this.accountKeys.clear();
    }
    // versions commit in order: the snapshot holds every version up to the highest tombstone (or
    // floor) it shows, and this read has every row above `seen` of it (slug tombstones, which no
    // cache reads, do not hold `seen` back)
    if (floor) this.seen = Math.max(this.seen, Number(floor.version));
    for (const x of r.rows) {
      if (x.kind === 'f') continue;
      const v = Number(x.version);
      if (x.kind === 'd' || x.kind === 'x') {
        this.domains.apply(x.kind === 'd' ? x.slug! : x.server_id, x.kind === 'd' ? x.server_id : undefined, x.host ?? '', v);
        if (v > this.seen) this.seen = v;
        continue;
      }
      if (x.kind === 'a' || x.kind === 'b') {
        this.accountKeys.apply(x.server_id, x.kind === 'a' ? x.slug! : undefined, v);
        if (v > this.seen) this.seen = v;
        continue;
      }
      if (x.kind === 'k' || x.kind === 'y' || x.kind === 'c' || x.kind === 'z') {
        if (x.kind === 'k' || x.kind === 'y')
          this.keys.apply(x.server_id, x.kind === 'k' ? { fingerprint: x.slug!, host: x.host!, publicKey: x.public_ip! } : undefined, v);
        else this.challenges.apply(x.server_id, x.kind === 'c' ? { keyAuthorization: x.slug!, expiresAt: Number(x.epoch) } : undefined, v);
        if (v > this.seen) this.seen = v;
        continue;
      }
      const had = this.servers.get(x.server_id);
      if (had && had.version > v) continue;
      if (had) {
        this.servers.delete(x.server_id);
        if (this.slugs.get(had.slug) === had) this.slugs.delete(had.slug);
      }
      if (x.kind === 'p') {
        const p: CachedPlacement = {
          serverId: x.server_id,
          slug: x.slug!,
          host: x.host!,
          epoch: Number(x.epoch),
          accountId: x.account_id!,
          publicIp: x.public_ip!,
          version: v,
        };
        this.servers.set(p.serverId, p);
        const other = this.slugs.get(p.slug);
        if (!other || other.version < v) this.slugs.set(p.slug, p);
      }
      if (v > this.seen) this.seen = v;
    }
    this.filled = true;
    this.domains.settle();
  }

  /** Records in this host's row the version the cache caught up to (what the prune may count on). */
  async record(): Promise<void> {
    if (!this.o.host || this.seen <= this.recorded) return;
    const v = this.seen;
    await this.pool.query('UPDATE hosts SET caught_up = $2 WHERE name = $1 AND caught_up < $2', [this.o.host, v]);
    this.recorded = v;
  }

  /** Prunes the tombstones every live host caught up past, and those older than the retention
   *  (placements-sql.ts); answers how many. Any host may run it at any time. */
  async prune(): Promise<number> {
    const retention = this.o.tombstoneRetentionMs ?? 7 * DAY;
    const r = await this.pool.query<{ n: string }>(PRUNE_TOMBSTONES, [retention / 1000]);
    const n = Number(r.rows[0]?.n ?? 0);
    if (n) this.log?.info('placements: tombstones pruned', { pruned: n });
    return n;
  }

  /** The tick's prune, every pruneEveryMs (default 10 minutes), one at a time. */
  private async pruneNow(): Promise<void> {
    const every = this.o.pruneEveryMs ?? 10 * 60_000;
    if (!every || this.pruning || this.now() - this.lastPrune < every) return;
    this.pruning = true;
    this.lastPrune = this.now();
    try {
      await this.prune();
    } catch {
      // the registry is away: the next tick's turn tries again
    } finally {
      this.pruning = false;
    }
  }

  private async refreshHosts(): Promise<void> {
    try {
      const r = await this.pool.query<{ name: string; advertise: string; public_ip: string; left_ms: string }>(
        'SELECT name, advertise, public_ip, (extract(epoch FROM lease_until - now()) * 1000)::bigint AS left_ms FROM hosts',
      );
      const at = this.now();
      this.hostsSeen = new Map(r.rows.map((x) => [x.name, { name: x.name, advertise: x.advertise, publicIp: x.public_ip, leftMs: Number(x.left_ms), at }]));
      this.reads.ok();
    } catch {
      // what was last read stays; the leases that run out from now on are excused (leases.ts)
      this.reads.failed();
    }
  }

  private async tick(): Promise<void> {
    await this.refreshHosts();
    await this.sync().catch(() => {});
    await this.record().catch(() => {});
    void this.pruneNow();
    if (!this.listener && !this.retry && this.running) void this.listen();
  }

  /** Opens the dedicated LISTEN connection; when it is lost, re-opens it (with backoff) and
   *  catches up on what changed meanwhile. */
  private async listen(): Promise<void> {
    if (!this.running || this.listener) return;
    await this.pool.ready(); // a multi-host URL: the host that takes writes, as the pool found it
    if (!this.running || this.listener) return;
    const c = new pg.Client({ connectionString: this.pool.target, connectionTimeoutMillis: this.o.connectTimeoutMs, keepAlive: true });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (this.listener === c) this.listener = undefined;
      void c.end().catch(() => {});
      if (this.running) this.later();
    };
    c.on('error', onLost);
    c.on('end', onLost);
    c.on('notification', (n) => {
      const kind = n.payload?.slice(0, 2);
      if (n.channel === PLACEMENT_CHANNEL && kind && FOLLOWED.has(kind) && Number(n.payload!.slice(2)) > this.seen) void this.sync().catch(() => {});
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${PLACEMENT_CHANNEL}`);
    } catch {
      onLost();
      // a failed connect also makes the pool look for the primary (after a failover)
      await this.pool.query('SELECT 1').catch(() => {});
      return;
    }
    if (lost || !this.running) return;
    this.listener = c;
    this.listens++;
    this.backoff = this.o.reconnectMs ?? 200;
    this.log?.debug('placements: listening', { listens: this.listens });
    // whatever committed while no connection listened
    await this.sync().catch(() => {});
  }

  private later(): void {
    if (this.retry) return;
    const wait = this.backoff;
    this.backoff = Math.min(this.backoff * 2, (this.o.reconnectMs ?? 200) * 8);
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.listen();
    }, wait);
    this.retry.unref();
  }
}
