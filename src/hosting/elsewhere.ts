// Cluster mode: API calls on a server another host runs (issue 29 item 2). A request that acts on
// a server — `/servers/{id}` and everything under it (exec, files, logs, restart, domains, the exec
// WebSocket), `/expose` naming it in its body, and the MCP tools that run those routes in-process
// — whose server this host's store does not have and the placement cache puts on another host
// goes to that host's API app over the channel, unauthenticated here: the owner checks the same
// Authorization (accounts and keys are shared through the registry) and ownership, and answers
// as if the client had come there. `GET /servers` adds the account's servers of every other host
// (each host's own view of its servers). A request another host forwarded here is answered here,
// never forwarded again (RequestInfo.forwarded). A request forwarded before this host's routes
// ran is counted against the rate limits on its owner (by the client's source the channel
// carries, and its key); a list part, counted here, is marked so (`counted`). Until the channel
// is bound (a single box, a cluster without a CA, the start) every request is answered here. A
// server id neither this host's store nor its placement cache knows costs one catch-up read only
// within the per-source budget of misses.ts (shared with unknown api keys): beyond it the request
// is answered here (404 for a server this host does not have), unread.
// A request for a server moving off this host waits for the move's end first (its hold): then it
// goes to the target that took it, or is answered here by the server that stayed.

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import {
  collectAnswer,
  errorReply,
  readBody,
  sendReply,
  withBody,
  type HttpApp,
  type Invocation,
  type Reply,
  type Req,
  type RequestInfo,
  type Res,
  type Route,
} from '../http/index.js';
import { systemClock, type Clock, type Timer } from '../clock.js';
import type { Logger } from '../log/index.js';
import { MissBudget } from '../misses.js';

/** A placement (the registry's record: server → host at an epoch) as this module forwards by it,
 *  from this host's placement cache: the host to send to, the epoch the owner checks. */
export interface PlacementToForward {
  serverId: string;
  slug: string;
  host: string;
  epoch: number;
}

/** What the channel offers the API (bound in main.ts once the channel is up). */
export interface ServerForwarding {
  /** The placement of server `id` when the cluster places it on another host. */
  placed(id: string): PlacementToForward | undefined;
  /** Whether `host`'s lease runs (a host that is down is not asked: a read of its server is answered here, `unavailable`). */
  up(host: string): boolean;
  /** The other hosts that run servers of `accountId`. */
  hostsOf(accountId: string): string[];
  /** One catch-up of the placement cache with the registry (a server created elsewhere a moment ago). */
  refresh(): Promise<void>;
  /** Resolves when a move of server `id` off this host ends (undefined: none); a request for it
   *  waits for that, then goes where the server is (src/moves' holds, wired in main.ts). */
  hold?(id: string): Promise<void> | undefined;
  /** `counted`: this host's routes counted the request against the rate limits (the owner does not count it again). */
  forward(host: string, req: Req, res: Res, info: RequestInfo, o?: { server?: PlacementToForward; body?: Buffer; counted?: boolean }): Promise<void>;
  upgrade(host: string, req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo, o?: { server?: PlacementToForward }): void;
}

/** `/expose`'s body limit (its route's): a larger body is answered 413 here. */
const EXPOSE_BODY = 4096;
/** Most bytes of one host's server list read back. */
const LIST_MAX = 8 * 1024 * 1024;
/** How long the list waits for another host's part (one that stopped answering is listed without). */
const LIST_WAIT_MS = 3000;

const SERVER_PATH = /^\/servers\/([^/]+)(?:\/|$)/;
const EXACT = /^\/servers\/[^/]+\/?$/;
const SERVER_ID = /^srv_[0-9a-f]{1,32}$/;

function decoded(s: string | undefined): string | undefined {
  if (s === undefined) return undefined;
  try {
    return decodeURIComponent(s);
  } catch {
    return undefined;
  }
}

export class Elsewhere {
  private f?: ServerForwarding;

  constructor(
    private readonly local: { get(id: string): unknown },
    private readonly log: Logger,
    /** What a server id no cache knows may cost in catch-up reads, per source. */
    private readonly misses = new MissBudget(),
    /** The list wait's time (tests move it). */
    private readonly clock: Clock = systemClock,
  ) {}

  bind(f: ServerForwarding): void {
    this.f = f;
  }

  /** The placement of a server another host runs, for a request not already forwarded here. */
  private where(id: unknown, info: RequestInfo): PlacementToForward | undefined {
    if (!this.f || info.forwarded || typeof id !== 'string' || this.local.get(id) !== undefined) return undefined;
    return this.f.placed(id);
  }

  /** As `where`, asking the registry once when no cache knows a server id (made on another host a
   *  moment ago), within the budget of the caller's source. */
  private async locate(id: unknown, info: RequestInfo): Promise<PlacementToForward | undefined> {
    // a server moving off this host: nothing is answered by the copy that is leaving (a change to it would be lost)
    if (this.f && !info.forwarded && typeof id === 'string') await this.f.hold?.(id);
    const p = this.where(id, info);
    if (p || !this.f || info.forwarded || typeof id !== 'string' || !SERVER_ID.test(id) || this.local.get(id) !== undefined) return p;
    if (!this.misses.allow(id, info.ip)) return undefined;
    await this.f.refresh().catch(() => {});
    const found = this.where(id, info);
    if (!found && this.local.get(id) === undefined) this.misses.unknown(id);
    return found;
  }

  /** GET of the server itself while its host is down: answered here, from the placement cache (state `unavailable`). */
  private shownHere(method: string | undefined, exact: boolean, p: PlacementToForward): boolean {
    return method === 'GET' && exact && !this.f!.up(p.host);
  }

  /** An API request: forwarded to the owner of the server it acts on, or answered by `router`. */
  handle(router: HttpApp, req: Req, res: Res, info: RequestInfo): Promise<void> | void {
    if (!this.f || info.forwarded) return router.handle(req, res, info);
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const id = decoded(SERVER_PATH.exec(path)?.[1]);
    if (id !== undefined)
      return this.locate(id, info).then((p) =>
        p && !this.shownHere(req.method, EXACT.test(path), p) ? this.f!.forward(p.host, req, res, info, { server: p }) : router.handle(req, res, info),
      );
    if (path === '/expose' && (req.method === 'POST' || req.method === 'DELETE')) return this.expose(router, req, res, info);
    return router.handle(req, res, info);
  }

  /** `/expose` names its server in the body: read it (small) to know where it goes. */
  private async expose(router: HttpApp, req: Req, res: Res, info: RequestInfo): Promise<void> {
    let body: Buffer;
    try {
      body = await readBody(req, EXPOSE_BODY);
    } catch (err) {
      return void sendReply(res, errorReply(err, info.requestId, this.log));
    }
    let server: unknown;
    try {
      server = (JSON.parse(body.toString('utf8')) as { server?: unknown } | null)?.server;
    } catch {
      server = undefined; // the router answers invalid_json
    }
    const p = await this.locate(server, info);
    if (p) return this.f!.forward(p.host, req, res, info, { server: p, body });
    return router.handle(withBody(req, [body], false), res, info);
  }

  /** A WebSocket upgrade on the API (exec): to the owner, or to `local`. */
  upgrade(
    local: (req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo) => void,
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    info: RequestInfo,
  ): void {
    const id = this.f && decoded(SERVER_PATH.exec(new URL(req.url ?? '/', 'http://x').pathname)?.[1]);
    if (id === undefined) return local(req, socket, head, info);
    void this.locate(id, info).then((p) => (p ? this.f!.upgrade(p.host, req, socket, head, info, { server: p }) : local(req, socket, head, info)));
  }

  /** A declared route run in-process (an MCP tool): on the owner when it acts on another host's server. */
  async invoke(run: (r: Route, call: Invocation) => Promise<Reply>, r: Route, call: Invocation): Promise<Reply> {
    const id = r.path.startsWith('/servers/:id') ? call.params.id : r.path === '/expose' ? (call.body as { server?: unknown } | undefined)?.server : undefined;
    const p = await this.locate(id, call.info);
    if (!p || this.shownHere(r.method, r.path === '/servers/:id', p)) return run(r, call);
    const query = new URLSearchParams(call.query).toString();
    const url = r.path.replace(/:(\w+)/g, (_, k: string) => encodeURIComponent(call.params[k] ?? '')) + (query ? `?${query}` : '');
    const json = call.raw === undefined && call.body !== undefined;
    const body = call.raw ?? (json ? Buffer.from(JSON.stringify(call.body)) : undefined);
    const headers = { ...call.headers, ...(json ? { 'content-type': 'application/json' } : {}) };
    const c = await collectAnswer(r.method, url, headers, body, call.maxAnswer ?? 8 * 1024 * 1024, (req, res) =>
      this.f!.forward(p.host, req, res, call.info, { server: p, body }),
    );
    return { status: c.status, headers: c.headers, body: c.json ?? c.body, ...(c.cut ? { cut: true } : {}) } as Reply;
  }

  /** The account's servers on the other hosts, each host's own view of them, and the hosts that gave
   *  none (down, cut off, too slow: their servers are shown from the placement cache, `unavailable`). */
  async others(accountId: string, authorization: string | undefined, info: RequestInfo): Promise<{ servers: unknown[]; silent: string[] }> {
    const f = this.f;
    if (!f || info.forwarded || !authorization) return { servers: [], silent: [] };
    // read-your-writes across hosts: a server just made on another host is listed (one catch-up read, cheap when nothing changed)
    await f.refresh().catch(() => {});
    const silent: string[] = [];
    const lists = await Promise.all(
      f.hostsOf(accountId).map(async (host) => {
        let timer: Timer | undefined;
        const late = new Promise<undefined>((r) => (timer = this.clock.after(LIST_WAIT_MS, () => r(undefined))));
        const c = await Promise.race([
          collectAnswer('GET', '/servers', { authorization, accept: 'application/json' }, undefined, LIST_MAX, (req, res) =>
            // GET /servers was counted here: its parts are not counted again on their hosts
            f.forward(host, req, res, info, { counted: true }),
          ),
          late,
        ]).finally(() => timer?.cancel());
        // 200, or 402 with the list beside the upgrade envelope
        const servers = (c?.json as { servers?: unknown } | undefined)?.servers;
        if (Array.isArray(servers)) return servers as unknown[];
        this.log.info('servers of another host not listed by it', { peer: host, status: c ? c.status : 'no answer in time', rid: info.requestId });
        silent.push(host);
        return [];
      }),
    );
    return { servers: lists.flat(), silent };
  }
}
