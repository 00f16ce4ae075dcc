// Composition root: load config, open the store, build the runtime, the apps and the edge,
// start the parts in order (rolling back on failure), and wire signals (SIGTERM/SIGINT:
// graceful stop; SIGHUP: reload TLS). Containers keep running when the daemon stops.
//
// Each part is built by its module's start function from the daemon's record; the function's
// parameter type says which parts it reads, and each is listed after those. Start order: the
// host-name locks (containers only: taken before anything is made, so a refused start leaves
// nothing behind) → store (its stats flushed every 2 s) → registry (cluster mode: its first round
// trips started, not awaited: a silent registry keeps no listener waiting) → payments → tls → acme (stored certificates installed, the host's own
// ordered or renewed in the background) → lxcfs (the servers' /proc view, before any boot)
// → runtime (cluster mode: every start of a server asks the registry's wake fence) → oom (OOM kills told to the server's user) → flows (connections dropped by servers'
// bounds: the metric and their rootbox.log) → presence (idle tracker) → billing (built;
// settled recharges credited) → proxy → ports (exposed TCP) → ssh → hosting (registers itself as
// billing's tier keeper, reopens ports, applies tiers) → metering (billing's loop; cluster mode: started
// by the joined part, once the registry has the box's accounts) → verify (the API)
// → edge (listening: until the channel is there its sites are the local proxy's) → joined (cluster
// mode: the registry's answer to this start awaited — its refusal stops the start —, the box's join
// (tried again with back-off while the registry cannot be reached), then hosting's names reconciled, the channel: host-to-host mTLS, forwarding) → admin
// → metrics (its own loopback listener; scrape-time gauges read the runtime and the data dir).

import { domainCerts, startAcme, type Acme } from './acme/index.js';
import { refuseIncompleteRebuild, startAdmin, type AdminListener } from './admin/index.js';
import { createBilling, type Billing } from './billing/index.js';
import { startChannel, type Channel } from './channel/index.js';
import type { Config } from './config/index.js';
import { startEdge, startTls, type Edge, type TlsManager } from './edge/index.js';
import { startCheckpoints, type Checkpoints } from './checkpoints/index.js';
import { boxRecords, startHosting, watchPlacedAway, type HostingApi, type HostChoice } from './hosting/index.js';
import type { HttpApp } from './http/index.js';
import { systemClock, type Clock } from './clock.js';
import { fencedServers, leftRunning, watchFence, type FenceWatching } from './fencing.js';
import { apiUntilJoined, frontOf, gatedEdgeCa, joinUntilDone } from './joining.js';
import { nothing, partsOf, startAll, type Part } from './lifecycle.js';
import { createLogger, type Logger } from './log/index.js';
import { serveMetrics, type MetricsListener } from './metrics/index.js';
import { startPayments, type Payments } from './payments/index.js';
import { createPorts, startPresence, type IdleTracker, type TcpExposer } from './presence/index.js';
import { startProxy, type Proxy } from './proxy/index.js';
import { keyedNames, startRegistry, type JoinReport, type Registry } from './registry/index.js';
import {
  createRuntime,
  hostClaims,
  lockHost,
  runCommand,
  startLxcfs,
  startOomWatch,
  startFlowWatch,
  type ContainerRuntime,
  type HostLock,
  type Lxcfs,
  type OomWatch,
  type FlowWatch,
  type ReconcileReport,
  type Runtime,
  type StartGuard,
} from './runtime/index.js';
import { generateServerKeyPair, startSsh, type SshServer } from './ssh/index.js';
import { openStore, type Store } from './store/index.js';
import { startDrain, startMoves, type Drain, type Moves } from './moves/index.js';
import { createVerify } from './verify/index.js';

export interface Daemon<R extends Runtime = ContainerRuntime> {
  readonly cfg: Readonly<Config>;
  readonly edge: Edge;
  readonly store: Store;
  readonly tls: TlsManager;
  /** ACME certificates (the host's, servers' domains) and the HTTP-01 responder; `configured` false without https.acme. */
  readonly acme: Acme;
  readonly ssh: SshServer;
  readonly payments: Payments;
  readonly runtime: R;
  readonly presence: IdleTracker;
  readonly ports: TcpExposer;
  readonly proxy: Proxy;
  readonly billing: Billing;
  readonly checkpoints: Checkpoints;
  readonly hosting: HostingApi;
  readonly log: Logger;
  readonly admin: AdminListener;
  /** The Prometheus listener (port 0 when `metrics.listen` is off or could not bind). */
  readonly metrics: MetricsListener;
  /** The cluster registry this host is a member of; undefined on a single box. */
  readonly registry?: Registry;
  /** The host-to-host channel (cluster mode with a CA): forwarding to the host that runs a server. */
  readonly channel?: Channel;
  /** Servers moving between hosts (src/moves): the admin's move, the target's side, the holds, the recovery of dead hosts. */
  readonly moves: Moves;
  stop(): Promise<void>;
}

/** Builds the runtime once the store is open. The daemon's own makes runc containers
 *  (createRuntime); tests that need no container give a runtime of plain processes. `mayStart`:
 *  the start guard every start of an existing server awaits (cluster mode: the registry's wake
 *  fence; absent on a single box). */
export type RuntimeMaker<R extends Runtime> = (
  cfg: Readonly<Config>,
  store: Store,
  log: Logger,
  mayStart?: StartGuard,
  /** The host-name locks the daemon took first (containers only). */
  held?: HostLock,
) => Promise<{ runtime: R; reconciled?: ReconcileReport }>;

const containers: RuntimeMaker<ContainerRuntime> = (cfg, store, log, mayStart, held) => createRuntime(cfg, store.runtime, log, mayStart, held);

/** The daemon's record as its parts fill it: each part reads the ones before it. */
type Parts<R extends Runtime> = { -readonly [K in keyof Daemon<R>]: Daemon<R>[K] } & {
  run: typeof runCommand;
  /** The clock of the parts that keep time windows of their own (the SMS resend gap). */
  now: () => number;
  statsFlush: NodeJS.Timeout;
  hostLock?: HostLock;
  lxcfs?: Lxcfs;
  oom?: OomWatch;
  flows?: FlowWatch;
  verify: HttpApp;
  metering: Billing;
  /** Cluster mode: what this box copied into the registry when it joined (registry/join.ts). */
  joined?: JoinReport;
  /** Cluster mode: this host's drain (moves/drain.ts), run once the channel is up. */
  drain?: Drain;
};

export async function startDaemon<R extends Runtime = ContainerRuntime>(
  cfg: Readonly<Config>,
  log: Logger = createLogger({ level: cfg.log.level }),
  makeRuntime: RuntimeMaker<R> = containers as unknown as RuntimeMaker<R>,
  o: {
    now?: () => number;
    /** The clock of the join's back-off, the fences, hosting's timers, the moves part and the drain (a test moves it). */
    clock?: Clock;
    /** Aborted by SIGTERM/SIGINT during the start: a join still waiting for the registry gives up (serve then stops what started). */
    stopping?: AbortSignal;
  } = {},
): Promise<Daemon<R>> {
  const d = { cfg, log, run: runCommand, now: o.now ?? Date.now } as Parts<R>;
  const clock = o.clock ?? systemClock;
  const part = partsOf<Parts<R>>();
  let edgeCa: ReturnType<typeof gatedEdgeCa> | undefined;
  let joined = !cfg.cluster.registry; // cluster mode: once the joined part ran (joining.ts)
  let placedAway: (() => void) | undefined; // cluster mode: the watch of servers placed on another host (its stop)
  let fenceWatch: FenceWatching | undefined; // cluster mode with containers: the detached fence (its stop, the starts it must know at once)
  const parts: Part<Parts<R>>[] = [
    // one daemon per bridge, nft table, subnet, uid range, port pool, metrics address and data dir:
    // claimed before anything is made (a refused start generates no CA, starts no lxcfs)
    part(
      'hostLock',
      () => (makeRuntime === (containers as unknown) ? lockHost(hostClaims(cfg)) : undefined),
      (l) => l?.release(),
    ),
    part(
      'store',
      () => (refuseIncompleteRebuild(cfg.dataDir), openStore(cfg.dataDir)),
      (s) => s.close(),
    ),
    part(
      'statsFlush',
      (d) => setInterval(() => void d.store.stats.flush().catch((err) => log.error('stats flush failed', { err })), 2000).unref(),
      clearInterval,
    ),
    // cluster mode only: schema check and host registration under way (r.ready). At a stop, the
    // lease is released only when no server is left running: containers outlive the daemon, and
    // while they run this host holds its lease until it runs out, as after a crash (issue 38)
    part('registry', startRegistry, (r) => r?.stop({ release: !leftRunning(d.runtime) })),
    part('payments', startPayments),
    part(
      'tls',
      (d) => startTls({ ...d, registry: d.registry && (edgeCa = gatedEdgeCa(d.registry)) }),
      (t) => t.close(),
    ),
    part('acme', startAcme, (a) => a.stop()),
    part(
      'lxcfs',
      (d) => startLxcfs(d, makeRuntime === (containers as unknown)),
      (l) => l?.stop(),
    ),
    part(
      'runtime',
      async (d) => {
        const r = d.registry; // cluster mode: no start of a server placed elsewhere or deleted (read once the registry answered)
        // a server moving off this host starts only once its move ended (then the fence refuses it
        // if it left), waited for outside the server's queue (the move's stop and checkpoint use it)
        // and, once the fence let it, listed for the detached fence before its container exists
        const guard =
          r &&
          Object.assign(async (id: string) => (await r.ready, await r.fence.check(id), fenceWatch?.starting(id)), {
            waitFor: (id: string) => d.moves?.holdOfServer(id),
          });
        const { runtime, reconciled } = await makeRuntime(cfg, d.store, log, guard, d.hostLock);
        if (reconciled) log.info('reconciled servers with runc', { ...reconciled });
        return runtime;
      },
      (rt) => rt.close?.(), // containers keep running; the host-name locks go
    ),
    part('oom', startOomWatch, (o) => o?.stop()),
    part('flows', startFlowWatch, (f) => f?.stop()),
    part('presence', startPresence),
    part('billing', createBilling, nothing), // built; settled recharges credited; metering starts below
    part('proxy', startProxy),
    part('ports', createPorts, (p) => p.closeAll()),
    part('ssh', startSsh),
    part('checkpoints', startCheckpoints, (c) => c.engine.store.close()),
    part(
      'hosting',
      async (d) => {
        const h = await startHosting({
          ...d,
          makeKeyPair: generateServerKeyPair,
          certs: domainCerts(d.acme),
          names: d.registry && keyedNames(d.registry.names, d.registry.shared, d.registry.settings),
          sharedDomains: d.registry?.shared,
          sharedAccounts: d.registry?.accounts,
          placements: d.registry?.placements,
          hostChoice: d.registry && hostChoice(d.registry, d), // the channel and the drain read when a create comes
          quotas: d.registry?.quotas,
          sleeps: d.presence,
          clock, // its timers: automatic checkpoints, the server list's wait for other hosts
        });
        d.registry?.reportCapacity(h.core.capacity); // the lease carries this host's room
        return h;
      },
      (h) => (h.core.autoCheckpoints?.stop(), h.core.domains.stop()),
    ),
    // its timers on the daemon's clock; the record itself read through it (the channel, made after this part, when a move runs)
    part(
      'moves',
      (d) => startMoves(Object.assign(Object.create(d) as typeof d, { clock })),
      (m) => m.stop(),
    ),
    // single box: metering now; cluster mode: once the box joined (the channel part), as its passes price with the registry's totals
    part('metering', (d) => (d.registry ? undefined : meter(d.billing, log), d.billing)),
    part('verify', createVerify, nothing),
    part(
      'edge',
      // the channel's front and every host's domains once the channel is there (the joined part)
      (d) =>
        startEdge({
          ...d,
          hosting: apiUntilJoined(d.hosting, () => joined),
          proxy: frontOf({
            proxy: d.proxy,
            channel: () => d.channel,
            cluster: !!d.registry,
            domain: cfg.domain,
            has: (slug) => d.store.servers.bySlug(slug) !== undefined,
            joined: () => joined,
            hold: (host) => d.moves?.holdOfHost(host),
          }),
          aliases: (host) => (d.channel ? d.channel.aliases(host) : d.hosting.core.domains.slugOf(host)),
        }),
      (e) => e.stop(cfg.shutdownTimeout),
    ),
    part(
      'channel', // cluster mode, once the edge and SSH listen: joined (joining.ts), then the mTLS listener, forwarding to other hosts (the proxy's, the API's for servers of other hosts, and SSH logins with their keys)
      async (d) => {
        // a start as a single box forgets the join mark: what it writes then is joined when it returns to cluster mode
        if (!d.registry) return void d.store.joined.clear();
        await d.registry.ready; // refused (schema, token, name): the start fails here, nothing placed
        // cut off from the registry and every peer: this host's running servers frozen, then stopped, before another may recover them
        // back in touch with the registry after the fence: copies of servers recovered elsewhere meanwhile removed
        // (a server whose move's outcome is being settled: its copy left to the moves part, asked.ts)
        d.registry.fenceServers(fencedServers(d.runtime), clock, () => d.hosting.core.dropMoved(undefined, (id) => d.moves.settling(id)));
        // the same fence once this daemon is gone while its containers run (stopped, crash-looping): a detached watchdog
        if (cfg.cluster.recoverAfter > 0 && makeRuntime === (containers as unknown)) fenceWatch = watchFence(d.registry, d.runtime, cfg, clock);
        // a box's accounts, ledger, domains and certificates copied into the registry once, before it serves in cluster mode;
        // tried again with back-off while the registry cannot be reached (not joined meanwhile: 503 for what needs it)
        const registry = d.registry;
        const done = await joinUntilDone(() => registry.join(boxRecords(d.store, cfg.dataDir)), { clock, log, stopping: o.stopping });
        if (!done) return undefined; // stopping (serve stops what started)
        meter(d.billing, log); // the registry has every account of this box: no grant given twice, no zero totals cached
        await d.hosting.core.join((id) => d.moves.settling(id));
        // the target's side of a move answers peers under the API app; requests for a server moving off this host wait
        const c = await startChannel({ ...d, hosting: { ...d.hosting, router: d.moves.withTarget(d.hosting.router) }, moveHold: (h) => d.moves.holdOfHost(h) });
        if (c) d.hosting.bindChannel({ ...c.servers, hold: (id) => d.moves.holdOfServer(id) });
        const placements = d.registry?.placements;
        // down is no lease and no answer on the channel: a host cut off from the registry alone still serves
        if (c) placements?.answeredBy((host, advertise) => c.answering(host, advertise));
        if (c)
          d.registry.contact.channelBy(
            (host, advertise) => c.answering(host, advertise),
            (host, advertise) => c.probe(host, advertise),
            (host, advertise) => c.registryAgo(host, advertise),
          );
        // servers' keys from the placement cache's memory; a miss (a key recorded a moment ago) reads one catch-up
        const keys = placements && {
          known: (fp: string) => placements.keys.byFingerprint(fp),
          fresh: (fp: string) => placements.sync().then(() => placements.keys.byFingerprint(fp)),
        };
        if (c && keys) d.ssh.reachElsewhere({ keys, open: (id, client) => c.openSsh(id, client) });
        // a server of this host the registry now places on another host (recovered or moved there
        // while it ran here): stopped and dropped at once, not only after a fence or at a restart
        placedAway = watchPlacedAway({
          placedAway: () => d.hosting.core.placedAway(),
          busy: (id) => d.moves.holdOfServer(id) !== undefined || d.moves.settling(id),
          drop: (ids) => d.hosting.core.dropMoved(ids),
          every: (ms, fn) => clock.every(ms, fn),
          everyMs: 1000,
          log,
        });
        joined = true;
        log.info('joined the cluster', { registry: d.registry.up ? 'reachable' : 'unreachable: serving what this host has', channel: !!c });
        await edgeCa?.settled(); // the HTTPS certificate under the cluster's CA, when the registry gives it within a second
        return c;
      },
      (c) => (placedAway?.(), fenceWatch?.stop(leftRunning(d.runtime)), c?.stop()),
    ),
    // a draining host moves its servers off (the mark in the registry, read each second): stopped before the channel, its moves under way finished
    part(
      'drain',
      (d) =>
        startDrain(d, {
          concurrency: cfg.cluster.drainConcurrency,
          retryMs: cfg.cluster.drainRetry,
          settleMs: cfg.cluster.lease,
          clock,
        }),
      (x) => x?.stop(),
    ),
    part(
      'admin',
      (d) => startAdmin(cfg.dataDir, { ...d, log: log.child({ part: 'admin' }) }),
      (a) => a.close(),
    ),
    part('metrics', serveMetrics, (m) => m.close()),
  ];
  d.stop = await startAll(parts, d, log);
  return d;
}

/** Starts billing's metering loop. */
function meter(b: Billing, log: Logger): void {
  b.start();
  log.debug('metering started');
}

/** Where a create goes when this host has no room (hosting/hostchoice.ts): the hosts of the registry,
 *  their capacity as last reported, reached over the channel (none without one: no cluster CA). */
function hostChoice(r: Registry, d: { readonly channel?: Channel; readonly drain?: Drain }): HostChoice {
  const channel = () => d.channel;
  return {
    self: r.host,
    // up by the registry's lease and by the channel's view (which the forward goes by); a draining host takes none
    hosts: async () => (channel() ? (await r.hosts.list()).filter((h) => r.placements.host(h.name)?.up && !h.drain) : []),
    closed: () => d.drain?.closed(),
    forward: (host, c) => channel()!.forwardApi(host, c.req, c.res, c.info, { body: c.body, counted: true }), // counted by this host's create route
    changed: () => r.renew(),
  };
}

/** Runs the daemon in the foreground until SIGTERM/SIGINT (heard from before the start: one
 *  during a long start — a join waiting for the registry — stops what started, in order). */
export async function serve(cfg: Readonly<Config>): Promise<void> {
  const log = createLogger({ level: cfg.log.level });
  process.on('uncaughtException', (err) => log.error('uncaught exception; still serving', { err }));
  process.on('unhandledRejection', (err) => log.error('unhandled rejection; still serving', { err }));
  const stopping = new AbortController();
  let daemon: Daemon | undefined;
  const stop = async (signal: string) => {
    if (stopping.signal.aborted && signal !== 'started') return;
    stopping.abort();
    if (!daemon) return void log.info('stopping once the start settles', { signal });
    log.info('stopping', { signal, deadlineMs: cfg.shutdownTimeout });
    await daemon.stop();
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGHUP', () => daemon?.tls.reload());
  daemon = await startDaemon(cfg, log, undefined, { stopping: stopping.signal });
  if (stopping.signal.aborted) await stop('started'); // a signal came during the start
}
