// The daemon's channel part (main.ts): what cluster mode's channel needs from the registry (the
// CA, this run's key registered), then the listener; a start that fails (the registry away a
// moment, this run's name not claimed yet) tried again with a back-off (START_RETRY_MS doubling up
// to START_RETRY_MAX_MS) while requests for servers of other hosts answer 503 host_unavailable.
// Wires the sender's side (the front, the API forwarder, SSH streams, one session per peer) and
// the owner's (ChannelServer) into the `Channel` the edge, the API and the SSH server use.

import type { CaPair } from '../registry/index.js';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import { metrics } from '../metrics/index.js';
import type { Channel } from './channel.js';
import { ApiForwarder, type ApiApp } from './sender-api.js';
import { RetryBudget } from './sender-body.js';
import { ClusterFront, type LocalProxy } from './sender-front.js';
import { ChannelHealth } from './sender-health.js';
import { PeerAdmission } from './owner-admit.js';
import { channelKeyPair, issueIdentity, REISSUE_MS, type Identity } from './identity.js';
import { ownersView, type Placements, type PlacementToRoute } from './lookup.js';
import { Peers } from './sender-peers.js';
import { ChannelServer } from './owner-server.js';
import { openSsh } from './sender-ssh.js';
import type { SshAcceptor } from './owner-ssh.js';

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
    /** When this host last reached the registry having heard a peer: answered to the peer's ask (registry/contact.ts). */
    contact?: { vouchAgo(peer: string): number | undefined };
  };
  store: { servers: { bySlug(slug: string): { id: string } | undefined; get(id: string): { id: string } | undefined } };
  proxy: LocalProxy;
  /** The API app: answers API requests other hosts forward here (sender-api.ts); `core.domains`: this host's own active domains. */
  hosting?: { router: ApiApp; upgrade?: ApiApp['upgrade']; core?: { domains: { slugOf(host: string): string | undefined } } };
  /** This host's SSH server, for the SSH connections other hosts forward here. */
  ssh?: SshAcceptor;
  /** The start's retries, the certificate's reissue and every timer of the channel's own (pings,
   *  connect and SSH open timeouts, the raw lane's idle timers, the wait for a peer's key): tests move it. */
  clock?: Clock;
  /** Requests for a server moving off this host wait for this (src/moves, wired in main.ts). */
  moveHold?: (host: string) => Promise<void> | undefined;
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
  // the owner's check of the epoch a sender saw: the placement cache's, or the epoch this host
  // wrote itself where the cache trails it (lookup.ts)
  const owned = ownersView(lookup, r.host, r.names && ((id) => r.names!.epochOf(id)));
  const health = new ChannelHealth();
  // both sides take a peer only with the key its host registered
  const admit = new PeerAdmission(r.hosts, clock);
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
      hold: d.moveHold,
      vouch: r.contact && ((peer) => r.contact!.vouchAgo(peer)),
      api: app && { app, has: (id) => d.store.servers.get(id) !== undefined, placements: owned, self: r.host, log },
      log,
      clock,
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
  const sshOpen = { peers, placements: lookup, self: r.host, timeoutMs: d.cfg.cluster.forwardConnectTimeout, log, clock };
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
    probe: (host, advertise) => peers.probe(host, advertise),
    registryAgo: (host, advertise) => peers.registryAgo(host, advertise),
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
