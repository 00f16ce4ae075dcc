// Types shared by every HTTP-facing module: the request both listeners hand over (HTTP/1.1
// IncomingMessage or the HTTP/2 compatibility request), a handler's context and its reply.

import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import type { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';

export type Req = IncomingMessage | Http2ServerRequest;
/** writeHead as both response kinds take it: @types/node 24 overloads it differently on the two,
 *  and TypeScript cannot call a method through a union of two overload sets. */
interface WriteHead {
  writeHead(statusCode: number, headers?: OutgoingHttpHeaders): this;
}
export type Res = (ServerResponse | Http2ServerResponse) & WriteHead;

export interface Reply {
  status: number;
  headers?: Record<string, string | string[]>;
  /** An object is sent as JSON; a string or Buffer as is (set content-type in headers). */
  body?: unknown;
}

/** Returned by a handler that wrote the response itself (streams, proxying). */
export const HANDLED = Symbol('handled');
export type HandlerResult = Reply | typeof HANDLED;

export interface Ctx {
  req: Req;
  res: Res;
  method: string;
  /** Path without the query string, percent-decoding not applied. */
  path: string;
  query: URLSearchParams;
  params: Record<string, string>;
  host: string;
  /** Address of the peer that connected to us. */
  ip: string;
  /** `https` or `http`, as the client reached us. */
  scheme: 'http' | 'https';
  requestId: string;
  /** The cluster host that forwarded this request here over the channel (RequestInfo.forwarded). */
  forwarded?: string;
  /** The forwarding host's own routes counted this request against the API's rate limits already (RequestInfo.counted). */
  counted?: boolean;
  log: Logger;
  /** Reads the body as JSON with the route's size limit and content-type rule. */
  json(): Promise<unknown>;
  /** Reads the raw body with the route's size limit. */
  raw(): Promise<Buffer>;
}

export type Handler = (ctx: Ctx) => HandlerResult | Promise<HandlerResult>;

export interface RouteOptions {
  /** Largest accepted body in bytes (413 beyond). Default 64 KiB. */
  bodyLimit?: number;
}

/** Something that answers requests for one host family (an API or the proxy). */
export interface HttpApp {
  /** Settles when the answer is under way; may return nothing when it was started synchronously. */
  handle(req: Req, res: Res, info: RequestInfo): Promise<void> | void;
}

/** An app told which server's host a TLS client named (SNI) while its handshake is still under way. */
export interface HelloApp {
  /** `slug`'s host was named in a ClientHello: a request for it is likely to follow the handshake.
   *  Returns at once and never throws. */
  hello(slug: string): void;
}

/** An app that also takes HTTP/1.1 upgrades (WebSockets) for a server's subdomain. */
export interface UpgradeApp {
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo & { slug: string }): void;
}

export interface RequestInfo {
  host: string;
  scheme: 'http' | 'https';
  requestId: string;
  ip: string;
  /** The edge's lane already forwarded this request and it failed after the app took it: answer this error, do not forward it again. */
  failure?: AppError;
  /** The cluster host that forwarded this request over the channel: it is answered here, never forwarded again. */
  forwarded?: string;
  /** With `forwarded`: that host's own routes counted the request against the API's rate limits
   *  already (a create sent on, a part of a server list); otherwise the owner counts it. */
  counted?: boolean;
  /** A server's own domain the edge routed to its `<slug>.{domain}` (host): the name the client asked for. */
  alias?: string;
}

/**
 * A request head read by the edge's own HTTP/1.1 reader (the lane, edge/lane.ts): a bodiless GET
 * or HEAD in origin form with one Host, nothing framing a body, no Upgrade or Expect. Everything
 * else goes to node's HTTP server.
 */
export interface LaneRequest {
  method: 'GET' | 'HEAD';
  target: string;
  /** The Host header as sent. */
  host: string;
  /** name, value, name, value… as sent (node's rawHeaders shape). */
  raw: string[];
  /** The client asked to close after the answer (Connection: close). */
  close: boolean;
}

/** How a lane exchange ended. */
export type LaneOutcome =
  /** answered whole; `reusable`: the client connection may take its next request */
  | { kind: 'answered'; status: number; reusable: boolean }
  /** nothing reached the client: node's HTTP server answers the same request (with `failure`, without forwarding it again) */
  | { kind: 'replay'; failure?: AppError }
  /** the answer was cut or the client left: the connection is closed (`status`: the one its head had, once it had one) */
  | { kind: 'cut'; status?: number };

/** A lane answer under way; told when the client's connection closes (one listener per connection, not per answer). */
export interface LaneExchange {
  clientGone(): void;
}

/** An app that answers lane requests itself, writing HTTP/1.1 on the client's connection. */
export interface LaneApp {
  /**
   * Starts answering `r` on `sock`; `done` is called exactly once when it is over. Returns
   * false, having done nothing, when only the full path can answer it.
   */
  lane(r: LaneRequest, sock: Duplex, info: RequestInfo & { slug: string }, done: (o: LaneOutcome) => void): LaneExchange | false;
}
