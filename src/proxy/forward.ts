// Forwarding to a server's app on <ip>:80 with http-proxy-3 over a keep-alive agent: plain
// requests (HTTP/1.1 and HTTP/2 clients) and WebSocket upgrades. Responses are handled here, not
// by http-proxy's passes, so that every header is cleaned (headers.ts) before node sees it; a
// refused, slow, malformed or vanishing upstream becomes a 502/504 page or a closed stream.

import { Agent, type ClientRequest, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { ProxyServer } from 'http-proxy-3';
import { AppError } from '../errors.js';
import type { Req, RequestInfo, Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { cleanResponseHeaders, prepareRequestHeaders } from './headers.js';
import { sendErrorPage } from './pages.js';

export interface Upstream {
  host: string;
  port: number;
}

export interface ForwardOptions {
  connectTimeout: number;
  upstreamTimeout: number;
  maxSockets: number;
  log: Logger;
}

/** Why a forward failed before anything reached the client (the caller may mark the app down). */
export type ForwardFailure = 'refused' | 'timeout' | 'bad_response' | 'error';

interface Ctx {
  info: RequestInfo;
  upstream: Upstream;
  connectTimedOut: boolean;
  idleTimedOut: boolean;
  proxyReq?: ClientRequest;
  retried?: boolean;
  body?: Readable;
  onFailure?: (f: ForwardFailure) => void;
}

const NO_BODY = new Set([204, 304]);

export class Forwarder {
  private readonly agent: Agent;
  private readonly proxy: ProxyServer;
  private readonly ctx = new WeakMap<object, Ctx>();

  constructor(private readonly opts: ForwardOptions) {
    // Free sockets are dropped after 4 s: most app servers close idle keep-alive connections
    // after 5 s, and reusing one they are closing gives a spurious reset.
    this.agent = new Agent({ keepAlive: true, maxSockets: opts.maxSockets, maxFreeSockets: 64, timeout: 4000, scheduling: 'lifo' });
    this.proxy = new ProxyServer({ xfwd: false, selfHandleResponse: true, proxyTimeout: opts.upstreamTimeout, toProxy: true });
    this.proxy.on('error', () => {}); // every call passes its own callback; this only keeps stray errors from throwing
    this.proxy.on('proxyReq', (proxyReq, req, res) => {
      this.armConnectTimeout(proxyReq, this.ctx.get(req));
      // A 101 to a request that asked for no upgrade: refuse it instead of leaving the client hanging.
      proxyReq.on('upgrade', (_r: IncomingMessage, s: Socket) => {
        s.destroy();
        this.failed(Object.assign(new Error('unexpected 101'), { code: 'BAD_STATUS' }), req as Req, res as Res);
      });
    });
    this.proxy.on('proxyReqWs', (proxyReq, req) => {
      const ctx = this.ctx.get(req);
      this.armConnectTimeout(proxyReq, ctx);
      proxyReq.on('response', (r: IncomingMessage) => r.on('error', () => {}));
      proxyReq.on('upgrade', (_r: IncomingMessage, s: Socket) => s.on('error', () => {}));
    });
    this.proxy.on('proxyRes', (proxyRes, req, res) => this.respond(proxyRes, req as Req, res as Res));
  }

  private armConnectTimeout(proxyReq: ClientRequest, ctx: Ctx | undefined): void {
    if (!ctx) return;
    ctx.proxyReq = proxyReq;
    proxyReq.on('timeout', () => (ctx.idleTimedOut = true));
    const sock = proxyReq.socket;
    if (!sock || !sock.connecting) return;
    const t = setTimeout(() => {
      ctx.connectTimedOut = true;
      proxyReq.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' }));
    }, this.opts.connectTimeout);
    sock.once('connect', () => clearTimeout(t));
    sock.once('close', () => clearTimeout(t));
  }

  /** Forwards one request; `body` replaces the request stream when it was buffered during a wake. */
  web(req: Req, res: Res, upstream: Upstream, info: RequestInfo, opts: { body?: Readable; onFailure?: (f: ForwardFailure) => void } = {}): void {
    const h2 = (req.httpVersionMajor ?? 1) >= 2;
    const h2Stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
    const unframed = h2 && req.headers['content-length'] === undefined && h2Stream?.endAfterHeaders === false && req.method !== 'GET' && req.method !== 'HEAD';
    prepareRequestHeaders(req.headers, info, { upgrade: false, bodyUnframed: unframed });
    this.ctx.set(req, { info, upstream, connectTimedOut: false, idleTimedOut: false, body: opts.body, onFailure: opts.onFailure });
    const target = { host: upstream.host, port: upstream.port, protocol: 'http:' };
    this.proxy.web(req as IncomingMessage, res as never, { target, agent: this.agent, buffer: opts.body }, (err) => this.failed(err, req, res));
  }

  private failed(err: Error, req: Req, res: Res): void {
    const ctx = this.ctx.get(req);
    const code = (err as { code?: string }).code;
    if ((res as { destroyed?: boolean }).destroyed || res.writableEnded) return; // the client went away
    if (res.headersSent) {
      (res as { destroy(): void }).destroy();
      return;
    }
    const info = ctx?.info ?? { requestId: '-' };
    // A kept-alive connection the app closed just as we reused it: a request without a body is
    // safe to send again, once, on a fresh connection.
    if (ctx && !ctx.retried && code === 'ECONNRESET' && ctx.proxyReq?.reusedSocket && !ctx.body && (req.method === 'GET' || req.method === 'HEAD')) {
      ctx.retried = true;
      const target = { host: ctx.upstream.host, port: ctx.upstream.port, protocol: 'http:' };
      this.proxy.web(req as IncomingMessage, res as never, { target, agent: this.agent }, (e) => this.failed(e, req, res));
      return;
    }
    let failure: ForwardFailure = 'error';
    let e: AppError;
    if (code === 'ECONNREFUSED') {
      failure = 'refused';
      e = new AppError('upstream', 'app_down', 'the app of this server is not accepting connections on port 80', {
        extra: { hint: 'Its /root/run.sh may have crashed or be restarting; see /var/log/run.sh.log on the server.' },
      });
    } else if (ctx?.connectTimedOut || ctx?.idleTimedOut || code === 'ETIMEDOUT' || code === 'EHOSTUNREACH') {
      failure = 'timeout';
      e = new AppError('timeout', 'upstream_timeout', ctx?.connectTimedOut || code !== 'ECONNRESET' ? 'the app of this server did not accept the connection in time' : 'the app of this server did not answer in time', {
        extra: { hint: 'Check that the server started by /root/run.sh answers requests on 0.0.0.0:80.' },
      });
    } else {
      e = new AppError('upstream', 'bad_gateway', `the app of this server broke the connection or sent an invalid response (${String(code ?? err.message).slice(0, 60)})`, {
        extra: { hint: 'See /var/log/run.sh.log on the server.' },
      });
    }
    ctx?.onFailure?.(failure);
    this.opts.log.debug('forward failed', { rid: info.requestId, code, err: err.message });
    try {
      sendErrorPage(req, res, e, info.requestId);
    } catch {
      (res as { destroy(): void }).destroy();
    }
  }

  private respond(proxyRes: IncomingMessage, req: Req, res: Res): void {
    // An app that dies mid-body cuts this response (the client sees a truncated stream), nothing more.
    const cut = () => {
      if (res.headersSent && !res.writableFinished) (res as { destroy(): void }).destroy();
    };
    proxyRes.on('error', cut);
    proxyRes.on('aborted', cut);
    const status = proxyRes.statusCode ?? 0;
    if ((res as { destroyed?: boolean }).destroyed) return void proxyRes.destroy();
    if (status < 200 || status > 599) {
      proxyRes.destroy();
      return this.failed(Object.assign(new Error(`status ${status}`), { code: 'BAD_STATUS' }), req, res);
    }
    const headers = cleanResponseHeaders(proxyRes.headers);
    try {
      res.writeHead(status, headers as never);
    } catch (err) {
      // node refused a header we let through: forget them all and answer 502 instead.
      proxyRes.destroy();
      for (const n of res.getHeaderNames()) res.removeHeader(n);
      return this.failed(err as Error, req, res);
    }
    if (req.method === 'HEAD' || NO_BODY.has(status)) {
      proxyRes.resume();
      res.end();
      return;
    }
    proxyRes.pipe(res as NodeJS.WritableStream);
  }

  /** Forwards a WebSocket handshake and then both byte streams. */
  ws(req: IncomingMessage, socket: Duplex, head: Buffer, upstream: Upstream, info: RequestInfo, onFailure?: (f: ForwardFailure) => void): void {
    prepareRequestHeaders(req.headers, info, { upgrade: true, bodyUnframed: false });
    this.ctx.set(req, { info, upstream, connectTimedOut: false, idleTimedOut: false, onFailure });
    const target = { host: upstream.host, port: upstream.port, protocol: 'http:' };
    this.proxy.ws(req, socket, head, { target, agent: false }, (err) => {
      const code = (err as { code?: string }).code;
      onFailure?.(code === 'ECONNREFUSED' ? 'refused' : 'error');
      writeRawError(socket, 502, 'app_down', 'the app of this server did not accept the WebSocket connection');
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Answers an HTTP/1.1 upgrade request that cannot be forwarded, on its raw socket. */
export function writeRawError(socket: Duplex, status: number, code: string, detail: string): void {
  if (!socket.writable || (socket as Socket).bytesWritten > 0) return void socket.destroy();
  const body = JSON.stringify({ error: code, detail });
  const reason = { 400: 'Bad Request', 404: 'Not Found', 402: 'Payment Required', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout' }[status] ?? 'Error';
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
}
