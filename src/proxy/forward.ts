// Forwarding to a server's app on <ip>:80. Plain requests (from HTTP/1.1 and HTTP/2 clients) go
// over our own HTTP/1.1 client: kept-alive connections from pool.ts, heads written and answers
// read by h1/, bodies streamed both ways with back-pressure. (http-proxy-3 over node's
// http.Agent reached 0.15× nginx's requests/s on bench/proxy; this path is what lets the proxy
// keep up.) WebSocket upgrades go through http-proxy-3. A refused, slow, malformed or vanishing
// upstream becomes a 502/504 page or a cut stream, never an exception.

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { ProxyServer } from 'http-proxy-3';
import { AppError } from '../errors.js';
import { rawError, type LaneRequest, type Req, type RequestInfo, type Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { HttpDate } from '../h1/index.js';
import { Batch } from './batch.js';
import { Exchange, type ExchangeShared, type ForwardFailure, type WebOptions } from './exchange.js';
import { DirectExchange, type DirectOptions } from './direct.js';
import { prepareUpgradeHeaders } from './headers.js';
import { sendErrorPage } from './pages.js';
import { UpstreamPool, type Upstream } from './pool.js';

export type { Upstream } from './pool.js';
export type { ForwardFailure, WebOptions } from './exchange.js';

export interface ForwardOptions {
  connectTimeout: number;
  upstreamTimeout: number;
  maxSockets: number;
  /** A source's share of maxSockets (pool.ts); default maxSockets. */
  maxSocketsPerSource?: number;
  /** Most requests waiting for a connection to one upstream (pool.ts); default: no bound. */
  maxWaitingPerServer?: number;
  /** A forwarded request body idle this long ends its request (exchange.ts); 0 or absent: never. */
  bodyIdleTimeout?: number;
  log: Logger;
}

const TARGET = /^[\x21-\x7e]+$/;

export class Forwarder {
  private readonly pool: UpstreamPool;
  private readonly proxy: ProxyServer;
  /** The exchanges' shared state: log and write batch; the lane's answers also take their Date from here. */
  private readonly shared: ExchangeShared;
  private readonly date = new HttpDate();

  constructor(private readonly opts: ForwardOptions) {
    this.shared = { log: opts.log, batch: new Batch(), bodyIdleTimeout: opts.bodyIdleTimeout ?? 0 };
    this.pool = new UpstreamPool({
      maxSockets: opts.maxSockets,
      maxPerSource: opts.maxSocketsPerSource,
      maxWaiting: opts.maxWaitingPerServer,
      connectTimeout: opts.connectTimeout,
      activeTimeout: opts.upstreamTimeout,
      idleTimeout: 4000,
    });
    this.proxy = new ProxyServer({ xfwd: false, proxyTimeout: opts.upstreamTimeout, toProxy: true });
    this.proxy.on('error', () => {}); // every call passes its own callback; this only keeps stray errors from throwing
    this.proxy.on('proxyReqWs', (proxyReq) => {
      const t = setTimeout(() => proxyReq.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' })), this.opts.connectTimeout);
      proxyReq.once('socket', (s) => s.once('connect', () => clearTimeout(t)));
      proxyReq.once('close', () => clearTimeout(t));
      proxyReq.on('response', (r: IncomingMessage) => r.on('error', () => {}));
      proxyReq.on('upgrade', (_r: IncomingMessage, s: Duplex) => s.on('error', () => {}));
    });
  }

  /** Forwards one request and its answer. */
  web(req: Req, res: Res, upstream: Upstream, info: RequestInfo, o: WebOptions): void {
    // HTTP/1.1 request targets were checked by node's parser; an HTTP/2 :path is checked here.
    if ((req.httpVersionMajor ?? 1) >= 2 && !TARGET.test(req.url ?? '')) {
      o.onDone?.();
      return sendErrorPage(req, res, AppError.of('invalid_target', 'the request target has characters that cannot be forwarded'), info.requestId);
    }
    new Exchange(this.pool, req, res, upstream, info, o, this.shared).start();
  }

  /** Forwards a lane request, answering it on the client's connection (direct.ts). */
  direct(r: LaneRequest, sock: Duplex, upstream: Upstream, info: RequestInfo, o: DirectOptions): DirectExchange {
    return new DirectExchange(this.pool, r, sock, upstream, info, o, { batch: this.shared.batch, date: this.date }).start();
  }

  /** Forwards a WebSocket handshake and then both byte streams. */
  ws(
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    upstream: Upstream,
    info: RequestInfo,
    serverId: string,
    onFailure?: (serverId: string, f: ForwardFailure) => void,
  ): void {
    prepareUpgradeHeaders(req.headers, info);
    // http-proxy-3 may have answered (101) before the app failed: then the socket is just closed
    const writtenBefore = (socket as Duplex & { bytesWritten?: number }).bytesWritten ?? 0;
    const target = { host: upstream.host, port: upstream.port, protocol: 'http:' };
    this.proxy.ws(req, socket, head, { target, agent: false }, (err) => {
      const code = (err as { code?: string }).code;
      onFailure?.(serverId, code === 'ECONNREFUSED' ? 'refused' : code === 'ETIMEDOUT' ? 'timeout' : 'error');
      rawError(socket, AppError.of('app_down', 'the app of this server did not accept the WebSocket connection'), { requestId: info.requestId, writtenBefore });
    });
  }

  /** Opens a connection to a dozing server's app for the request that will thaw it (pool.ts spare). */
  spare(upstream: Upstream): void {
    this.pool.spare(upstream);
  }

  /** Closes the spare connection to `upstream` (its app was thawed for something else, or stopped). */
  dropSpare(upstream: Upstream): void {
    this.pool.dropSpare(upstream);
  }

  /** Closes the free kept-alive connections to `upstream` (pool.ts dropIdle: after a thaw). */
  dropIdle(upstream: Upstream): void {
    this.pool.dropIdle(upstream);
  }

  close(): void {
    this.pool.close();
  }
}
