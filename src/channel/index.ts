// Public surface of the host-to-host channel (issue 29, DESIGN part 6): in cluster mode each host
// listens on cluster.listen with mutual TLS under the cluster CA (made by `rootbox cluster init`,
// read from the registry; this host's certificate issued at start and reissued before it ends),
// and its edge forwards `<slug>.{domain}` requests and WebSockets for servers of other hosts to
// their owner over one kept-alive HTTP/2 session per peer. A single box has no channel; a
// registry without a CA yet (never initialised by this version) leaves forwarding off, said once
// in the log.

import type { Logger } from '../log/index.js';
import type { CaPair } from '../registry/index.js';
import { ClusterFront, type LocalProxy } from './front.js';
import { issueIdentity, REISSUE_MS, type Identity } from './identity.js';
import type { Placements } from './lookup.js';
import { Peers } from './peers.js';
import { ChannelServer } from './server.js';

export type { Placements, PlacementView, HostView } from './lookup.js';
export { issueIdentity, type Identity } from './identity.js';

export interface Channel {
  /** What the edge serves `<slug>.{domain}` with: the local proxy, forwarding what is not here. */
  readonly front: LocalProxy;
  /** The channel listener's port. */
  readonly port: number;
  stop(): Promise<void>;
}

export interface ChannelPartDeps {
  cfg: { cluster: { listen: string; forwardConnectTimeout: number; forwardRetryBody: number } };
  log: Logger;
  registry?: {
    host: string;
    channel: { load(): Promise<CaPair | undefined> };
    placements: Placements;
  };
  store: { servers: { bySlug(slug: string): { id: string } | undefined } };
  proxy: LocalProxy;
}

/** The daemon's channel part (main.ts): undefined on a single box or before the cluster has a CA. */
export async function startChannel(d: ChannelPartDeps): Promise<Channel | undefined> {
  const r = d.registry;
  if (!r) return undefined;
  const log = d.log.child({ part: 'channel' });
  const pair = await r.channel.load().catch(() => undefined);
  if (!pair) {
    log.warn('no cluster CA in the registry: requests for servers of other hosts are not forwarded; run `rootbox cluster init`');
    return undefined;
  }
  let identity: Identity = issueIdentity(pair, r.host);
  const lookup = r.placements;
  const peers = new Peers({ identity: () => identity, connectTimeoutMs: d.cfg.cluster.forwardConnectTimeout, log });
  const server = new ChannelServer({ identity: () => identity, local: d.proxy, servers: d.store.servers, placements: lookup, log });
  const port = await server.listen(d.cfg.cluster.listen);
  const renew = setInterval(() => {
    identity = issueIdentity(pair, r.host);
    server.renew();
  }, REISSUE_MS).unref();
  log.info('channel listening', { listen: d.cfg.cluster.listen, port, host: r.host });
  const front = new ClusterFront({
    local: d.proxy,
    servers: d.store.servers,
    placements: lookup,
    peers,
    self: r.host,
    retryBody: d.cfg.cluster.forwardRetryBody,
    log,
  });
  return {
    front,
    port,
    async stop() {
      clearInterval(renew);
      peers.close();
      await server.close();
    },
  };
}
