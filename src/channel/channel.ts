// What the daemon gets from the channel part (part.ts): the edge's front and aliases, the API's
// way to servers of other hosts, SSH streams to their owners, and what the channel knows of its
// peers (health, whether one answers now, the bodies kept for a retry).

import type { RequestInfo, Req, Res } from '../http/index.js';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ApiForwardOptions } from './sender-api.js';
import type { RetryBudget } from './sender-body.js';
import type { LocalProxy } from './sender-front.js';
import type { PeerHealth } from './sender-health.js';
import type { PlacementToRoute } from './lookup.js';
import type { SshClient } from './sender-ssh.js';

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
  /** Opens a session to `host` at `advertise` in the background (unless one is open, opening, or failed a moment ago). */
  probe(host: string, advertise: string): void;
  /** How long ago `host`, answering now, last reached the registry having heard this host (its word, asked beside each ping). */
  registryAgo(host: string, advertise: string): number | undefined;
  /** The request bodies kept for a retry, per source and in total (sender-body.ts). */
  readonly retries: Pick<RetryBudget, 'held' | 'heldBy'>;
  stop(): Promise<void>;
}
