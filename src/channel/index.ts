// Public surface of the host-to-host channel (issue 29, DESIGN part 6): in cluster mode each host
// listens on cluster.listen with mutual TLS under the cluster CA (made by `rootbox cluster init`,
// read from the registry; this host's certificate issued at start and reissued before it ends, on
// one key pair per run whose public key the host registers: a peer is taken only with the key
// its host registered),
// and its edge forwards `<slug>.{domain}` requests and WebSockets (and those for servers' own
// domains, every host knowing the cluster's) for servers of other hosts to
// their owner over one kept-alive HTTP/2 session per peer. A single box has no channel; a
// registry without a CA yet (never initialised by this version) leaves forwarding off, said once
// in the log. A start whose CA read or key registration fails (the registry away a moment, this
// run's name not claimed yet) is tried again with a back-off (START_RETRY_MS doubling up to
// START_RETRY_MAX_MS) until it is up; meanwhile requests for servers of other hosts answer 503
// host_unavailable and the listener is not open.

import type { RequestInfo, Req, Res } from '../http/index.js';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import { metrics } from '../metrics/index.js';
import type { CaPair } from '../registry/index.js';
import { ApiForwarder, type ApiApp, type ApiForwardOptions } from './sender-api.js';
import { RetryBudget } from './sender-body.js';
import { ClusterFront, type LocalProxy } from './sender-front.js';
import { ChannelHealth, type PeerHealth } from './sender-health.js';
import { PeerAdmission } from './owner-admit.js';
import { channelKeyPair, issueIdentity, REISSUE_MS, type Identity } from './identity.js';
import type { Placements, PlacementToRoute } from './lookup.js';
import { Peers } from './sender-peers.js';
import { ChannelServer } from './owner-server.js';
import { openSsh, type SshClient } from './sender-ssh.js';
import type { SshAcceptor } from './owner-ssh.js';

export type { Placements, PlacementToRoute, HostView } from './lookup.js';
export { issueIdentity, type Identity } from './identity.js';
export type { ApiApp, ApiForwardOptions } from './sender-api.js';
export type { SshClient } from './sender-ssh.js';
export type { SshAcceptor } from './owner-ssh.js';
export type { PeerHealth, ForwardOutcome, ChannelErrorKind } from './sender-health.js';
export type { RetryBudget } from './sender-body.js';

export interface Channel {
  /** What the edge serves `<slug>.{domain}` with: the local proxy, forwarding what is not here. */
  readonly front: LocalProxy;
  /** What the edge routes servers' own domains by: this host's, then every other host's active ones (the registry's map). */
  readonly aliases: (host: string) => string | undefined;
  /** The channel listener's port (0 until the channel is up). */
  readonly port: number;
  /** Sends an API request to `host`'s API app over the channel (the client's address and request
   *  id with it, its Authorization checked there) and relays the answer; never throws: a host down
   *  or unreachable is answered 503 host_unavailable. */
  forwardApi(host: string, req: Req, res: Res, info: RequestInfo, o?: ApiForwardOptions): Promise<void>;
  /** The same for a WebSocket upgrade (exec over a WebSocket). */
  upgradeApi(host: string, req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo, o?: ApiForwardOptions): void;
  /** What the API needs to act on servers of other hosts (hosting's bindChannel). */
  readonly servers: {
    /** The placement of server `id` when the cache puts it on another host. */
    placed(id: string): PlacementToRoute | undefined;
    /** Whether a host's lease runs. */
    up(host: string): boolean;
    /** The other hosts that run servers of an account. */
    hostsOf(accountId: string): string[];
    /** One catch-up of the placement cache with the registry. */
    refresh(): Promise<void>;
    forward: Channel['forwardApi'];
    upgrade: Channel['upgradeApi'];
  };
  /** A byte stream to the SSH server of the host that runs `serverId`, authenticated for it; an AppError when there is none. */
  openSsh(serverId: string, client: SshClient): Promise<Duplex>;
  /** This host's sessions to its peers: up or down, errors, forwarded requests (sender-health.ts). */
  health(): PeerHealth[];
  /** Whether `host` at `advertise` answers on the channel now (an open session that answered its
   *  last ping): a host whose lease ran out is still up while it does (the placement cache's
   *  `answeredBy`, wired in main.ts). */
  answering(host: string, advertise: string): boolean;
  /** The request bodies kept for a retry, per source and in total (sender-body.ts). */
  readonly retries: Pick<RetryBudget, 'held' | 'heldBy'>;
  stop(): Promise<void>;
}

export interface ChannelPartDeps {
  cfg: { cluster: { listen: string; forwardConnectTimeout: number; forwardRetryBody: number; forwardRetryPerSource: number; forwardRetryTotal: number } };
  log: Logger;
  registry?: {
    host: string;
    channel: { load(): Promise<CaPair | undefined> };
    /** Registers this run's channel key; reads the key another host registered. */
    registerChannelKey(key: string): Promise<void>;
    hosts: { channelKey(host: string): Promise<string | undefined> };
    placements: Placements & { ofAccount(accountId: string): PlacementToRoute[]; sync(): Promise<void> };
    /** The epoch this host itself last wrote for a server it placed or started (registry names). */
    names?: { epochOf(serverId: string): number | undefined };
  };
  store: { servers: { bySlug(slug: string): { id: string } | undefined; get(id: string): { id: string } | undefined } };
  proxy: LocalProxy;
  /** The API app: answers API requests other hosts forward here (sender-api.ts); `core.domains`: this host's own active domains. */
  hosting?: { router: ApiApp; upgrade?: ApiApp['upgrade']; core?: { domains: { slugOf(host: string): string | undefined } } };
  /** This host's SSH server, for the SSH connections other hosts forward here. */
  ssh?: SshAcceptor;
  /** The start's retries and the certificate's reissue (tests move it). */
  clock?: Clock;
}

/** The first wait before a failed start of the channel is tried again; doubled after each failure, up to the max. */
export const START_RETRY_MS = 1000;
export const START_RETRY_MAX_MS = 60_000;

/** The daemon's channel part (main.ts): undefined on a single box or before the cluster has a CA. */
export async function startChannel(d: ChannelPartDeps): Promise<Channel | undefined> {
  const r = d.registry;
  if (!r) return undefined;
  const log = d.log.child({ part: 'channel' });
  const clock = d.clock ?? systemClock;
  const noCa = () => log.warn('no cluster CA in the registry: requests for servers of other hosts are not forwarded; run `rootbox cluster init`');
  // a registry that answers without a CA leaves the channel off; one that fails is asked again
  let pair: CaPair | undefined;
  let failure: Error | undefined;
  try {
    pair = await r.channel.load();
    if (!pair) return void noCa();
  } catch (err) {
    failure = err as Error;
  }
  const keys = channelKeyPair();
  /** This host's certificate: undefined until the channel is up (its peers are then not reached). */
  let identity: Identity | undefined;
  let server: ChannelServer | undefined;
  let port = 0;
  let renew: Timer | undefined;
  let nextTry: Timer | undefined;
  let stopped = false;
  const lookup = r.placements;
  // the owner's check of the epoch a sender saw: from the placement cache, or — a server the
  // cache lacks (its catch-up behind this host's own write) — the epoch this host wrote for it
  const owned: Pick<Placements, 'byServer'> = {
    byServer: (id) => {
      const epoch = lookup.byServer(id) ? undefined : r.names?.epochOf(id);
      return epoch === undefined ? lookup.byServer(id) : { serverId: id, slug: '', host: r.host, epoch };
    },
  };
  const health = new ChannelHealth();
  // both sides take a peer only with the key its host registered
  const admit = new PeerAdmission(r.hosts);
  const peers = new Peers({ identity: () => identity, connectTimeoutMs: d.cfg.cluster.forwardConnectTimeout, log, health, admit, clock });
  const hosting = d.hosting;
  const own = (host: string) => hosting?.core?.domains.slugOf(host);
  const app: ApiApp | undefined = hosting && {
    handle: (req, res, info) => hosting.router.handle(req, res, info),
    upgrade: hosting.upgrade && ((req, socket, head, info) => hosting.upgrade!(req, socket, head, info)),
  };
  /** One try at what the channel needs from the registry — the CA, this run's key registered (the
   *  other hosts take this host's connections only with it) — then the listener. */
  const up = async (): Promise<'up' | 'no-ca'> => {
    const ca = pair ?? (await r.channel.load());
    if (!ca) return 'no-ca';
    pair = ca;
    const me = issueIdentity(ca, r.host, keys);
    await r.registerChannelKey(me.keyId);
    const s = new ChannelServer({
      identity: () => identity!,
      local: d.proxy,
      servers: d.store.servers,
      placements: owned,
      aliases: own,
      ssh: d.ssh,
      admit,
      api: app && { app, has: (id) => d.store.servers.get(id) !== undefined, placements: owned, self: r.host, log },
      log,
    });
    identity = me;
    try {
      port = await s.listen(d.cfg.cluster.listen);
    } catch (err) {
      identity = undefined;
      throw err;
    }
    if (stopped) {
      await s.close(); // stopped while it opened
      return 'up';
    }
    server = s;
    renew = clock.every(REISSUE_MS, () => {
      identity = issueIdentity(ca, r.host, keys);
      s.renew();
    });
    log.info('channel listening', { listen: d.cfg.cluster.listen, port, host: r.host });
    return 'up';
  };
  /** After failure number `n` (from 1): the next try, later by the back-off. */
  const again = (n: number, err: Error) => {
    if (stopped) return;
    const wait = Math.min(START_RETRY_MAX_MS, START_RETRY_MS * 2 ** (n - 1));
    log.warn('channel not up: requests for servers of other hosts answer 503 until it is; tried again', { detail: err.message, tries: n, retryInMs: wait });
    nextTry = clock.after(
      wait,
      () =>
        void up().then(
          (x) => (x === 'no-ca' ? noCa() : log.info('channel up', { tries: n + 1 })),
          (e: Error) => again(n + 1, e),
        ),
    );
  };
  if (!failure)
    try {
      await up();
    } catch (err) {
      // a port this host cannot listen on is the operator's to fix: the start fails, as a single box's would
      if (err instanceof AppError && err.code === 'listen_failed') {
        peers.close();
        throw err;
      }
      failure = err as Error;
    }
  if (failure) again(1, failure);
  const retries = new RetryBudget(d.cfg.cluster.forwardRetryPerSource, d.cfg.cluster.forwardRetryTotal);
  const retry = { cap: d.cfg.cluster.forwardRetryBody, budget: retries };
  const unmetered = metrics.heldBytes('forward_retry', () => retries.held);
  const front = new ClusterFront({
    local: d.proxy,
    servers: d.store.servers,
    placements: lookup,
    peers,
    self: r.host,
    retry,
    log,
    health,
  });
  const api = new ApiForwarder({ peers, placements: lookup, self: r.host, retry, local: () => app, log, health });
  const forwardApi: Channel['forwardApi'] = (host, req, res, info, o) => api.forward(host, req, res, info, o);
  const upgradeApi: Channel['upgradeApi'] = (host, req, socket, head, info, o) => api.upgrade(host, req, socket, head, info, o);
  const sshOpen = { peers, placements: lookup, self: r.host, timeoutMs: d.cfg.cluster.forwardConnectTimeout, log };
  return {
    front,
    // another host's server: routed to its slug here, forwarded by the front
    aliases: (host) => {
      const slug = own(host);
      if (slug !== undefined) return slug;
      const p = lookup.domain?.(host);
      return p && p.host !== r.host ? p.slug : undefined;
    },
    get port() {
      return port;
    },
    forwardApi,
    upgradeApi,
    servers: {
      placed: (id) => {
        const p = lookup.byServer(id);
        return p && p.host !== r.host ? p : undefined;
      },
      up: (host) => lookup.host(host)?.up === true,
      hostsOf: (accountId) => [...new Set(lookup.ofAccount(accountId).map((p) => p.host))].filter((h) => h !== r.host),
      refresh: () => lookup.sync(),
      forward: forwardApi,
      upgrade: upgradeApi,
    },
    openSsh: (serverId, client) => openSsh(sshOpen, serverId, client),
    health: () => health.view(),
    answering: (host, advertise) => peers.answering(host, advertise),
    retries,
    async stop() {
      stopped = true;
      nextTry?.cancel();
      renew?.cancel();
      unmetered();
      peers.close();
      await server?.close();
    },
  };
}
