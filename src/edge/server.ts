// The edge: one HTTPS listener (HTTP/2 with HTTP/1.1 fallback, SNI) and one plain HTTP listener
// (redirect in production, direct serving with the embedded defaults). It owns its listening
// sockets and admits each connection (per-source and total caps, request-head deadline:
// guard.ts) before HTTP or TLS sees it. TLS is its own too (tls.ts's contexts by SNI): the
// handshake's ALPN choice sends a connection to an HTTP/2 server (h2) or to the lane and node's
// HTTP/1.1 server (http/1.1), each given the TLS socket as a connection through public APIs
// (handshake.ts: a TLS server's 'secureConnection', `emit('connection')`). Then it assigns request ids, dispatches by Host
// (target.ts checks the host and makes absolute-form targets origin-form), passes WebSocket
// upgrades on, answers whatever node's parser refuses with {error, detail}, bounds HTTP/2 stream
// resets (resets.ts), lets a client that shut its write side after its request still get the
// answer, and drains in-flight requests on stop.

import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttp2Server, type Http2Server, type ServerHttp2Session } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { configSchema } from '../config/index.js';
import type { Logger } from '../log/index.js';
import {
  appErrorReply,
  errorReply,
  newRequestId,
  rawError,
  sendReply,
  type HttpApp,
  type LaneApp,
  type LaneRequest,
  type Req,
  type RequestInfo,
  type Res,
  type UpgradeApp,
} from '../http/index.js';
import { AppError } from '../errors.js';
import { metrics } from '../metrics/index.js';
import { hostOf, route } from './dispatch.js';
import { ConnGuard } from './guard.js';
import { Handshakes } from './handshake.js';
import { LaneConnection, type LaneContext } from './lane.js';
import { boundResets } from './resets.js';
import { aliased, named, type Aliases, type Named } from './target.js';
import type { TlsManager } from './tls.js';
import { answerRefusals } from './wire.js';

/** How long an HTTP/2 session's streams may run on after the client's FIN (HTTP/2 has no half-close; a FIN means the peer left) before the session is destroyed. */
const H2_FIN_GRACE_MS = 250;

export interface EdgeApps {
  /** The hosting API; it may take WebSocket upgrades on its hosts too (exec over a WebSocket). */
  hosting: HttpApp & { upgrade?(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo): void };
  verify: HttpApp;
  /** Serves <slug>.{domain}; receives WebSocket upgrades for those hosts too. */
  proxy: HttpApp & Partial<UpgradeApp> & Partial<LaneApp>;
}

/** The `http` / `https` config slices; limits left out take the config defaults. */
export interface EdgeOptions {
  domain: string;
  http: {
    host: string;
    port: number;
    redirect: boolean;
    maxConnectionsPerAddress?: number;
    maxConnections?: number;
    headerTimeout?: number;
    keepAliveTimeout?: number;
  };
  https: { host: string; port: number; maxStreamResets?: number; streamResetWindow?: number };
  tls: TlsManager;
  /** ACME HTTP-01: the key authorization for a /.well-known/acme-challenge/<token> path, served on the plain listener before Host routing and the redirect; `ip` is the client's (cluster mode bounds the registry reads per source). */
  acmeChallenge?: (path: string | undefined, ip: string) => string | Promise<string | undefined> | undefined;
  apps: EdgeApps;
  /** Servers' own domains, served as their <slug>.{domain}. */
  aliases?: Aliases;
  log: Logger;
}

type HostKind = 'api' | 'verify' | 'site' | 'other';
const KIND = { hosting: 'api', verify: 'verify', proxy: 'site', none: 'other' } as const;

const HTTP_DEFAULTS = configSchema.shape.http.parse({});
const HTTPS_DEFAULTS = configSchema.shape.https.parse({});

export class Edge {
  /** Makes the TLS handshakes (ALPN h2 or http/1.1, certificates by SNI) on admitted connections. */
  private handshakes?: Handshakes;
  /** HTTP/2 sessions over TLS connections whose handshake chose h2. */
  private h2?: Http2Server;
  /** HTTP/1.1 over TLS (what the lane hands over, or every http/1.1 connection without a lane). */
  private https1?: HttpServer;
  private http?: HttpServer;
  private readonly front: { https?: NetServer; http?: NetServer } = {};
  private readonly sessions = new Set<ServerHttp2Session>();
  private guard!: ConnGuard;
  private inflight = 0;
  private drained?: () => void;
  private stopping = false;
  private lane?: LaneContext;
  /** ms an idle HTTP/1.1 connection stays open between requests, in node's server and the lane alike. */
  private readonly keepAliveTimeout: number;

  constructor(private readonly opts: EdgeOptions) {
    this.keepAliveTimeout = opts.http.keepAliveTimeout ?? 5_000;
  }

  get ports(): { http: number; https: number } {
    return {
      http: (this.front.http?.address() as AddressInfo | null)?.port ?? 0,
      https: (this.front.https?.address() as AddressInfo | null)?.port ?? 0,
    };
  }

  /** Open connections, in all or from one source (an IPv4 address or an IPv6 /64). */
  connections(ip?: string): number {
    return this.guard?.count(ip) ?? 0;
  }

  async start(): Promise<void> {
    const { tls, log } = this.opts;
    const h = { ...HTTP_DEFAULTS, ...this.opts.http };
    const hs = { ...HTTPS_DEFAULTS, ...this.opts.https };
    this.guard = new ConnGuard({ maxPerAddress: h.maxConnectionsPerAddress, maxTotal: h.maxConnections, headerTimeout: h.headerTimeout, log });
    this.h2 = createHttp2Server(
      { settings: { enableConnectProtocol: false, maxConcurrentStreams: 128 } },
      (req, res) => void this.onRequest(req, res, 'https'),
    );
    this.h2.on('session', (s) => this.onSession(s, { max: hs.maxStreamResets, windowMs: hs.streamResetWindow }));
    this.h2.setTimeout(120_000);
    this.https1 = createHttpServer(
      { requestTimeout: 0, headersTimeout: h.headerTimeout, keepAliveTimeout: this.keepAliveTimeout, requireHostHeader: false },
      (req, res) => void this.onRequest(req, res, 'https'),
    );
    this.https1.setTimeout(120_000);
    this.lane = this.laneContext();
    this.handshakes = new Handshakes(tls, log, (t, raw) => {
      if (raw) this.guard.secured(t, raw);
      this.dispatch(t);
    });
    this.http = createHttpServer(
      { requestTimeout: 0, headersTimeout: h.headerTimeout, keepAliveTimeout: this.keepAliveTimeout, requireHostHeader: false },
      (req, res) => void this.onRequest(req, res, 'http'),
    );
    this.http.setTimeout(120_000);
    answerRefusals(this.h2, log, (socket) => ConnGuard.of(socket));
    for (const srv of [this.https1, this.http] as const) {
      // a client's FIN after its request ends only its side: the answer still goes out, then we close
      (srv as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
      answerRefusals(srv, log, (socket) => ConnGuard.of(socket));
      srv.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.onUpgrade(req, socket, head, srv === this.https1 ? 'https' : 'http'));
    }
    this.front.https = createNetServer({ allowHalfOpen: true, noDelay: true }, (s) => this.guard.admit(s, true) && this.handshakes!.begin(s));
    this.front.http = createNetServer({ allowHalfOpen: true, noDelay: true }, (s) => this.accept(s, this.http!));
    await listen(this.front.https, this.opts.https.port, this.opts.https.host);
    try {
      await listen(this.front.http, this.opts.http.port, this.opts.http.host);
    } catch (e) {
      await new Promise((r) => this.front.https!.close(r));
      throw e;
    }
    this.guard.start();
    log.info('edge listening', { https: this.ports.https, http: this.ports.http, domain: this.opts.domain });
  }

  private accept(sock: Socket, server: HttpServer): void {
    if (!this.guard.admit(sock, false)) return;
    if (!this.lane) server.emit('connection', sock);
    else new LaneConnection(sock, 'http', this.lane, (s) => server.emit('connection', s));
  }

  /** A finished handshake goes where its ALPN choice says: HTTP/2, else HTTP/1.1 (through the lane when there is one). */
  private dispatch(t: TLSSocket): void {
    if (t.alpnProtocol === 'h2') return void this.h2!.emit('connection', t);
    const https1 = this.https1!;
    if (!this.lane) return void https1.emit('connection', t);
    new LaneConnection(t, 'https', this.lane, (s) => https1.emit('connection', s));
  }

  /** The lane's view of this edge, when the proxy takes lane requests. */
  private laneContext(): LaneContext | undefined {
    const app = this.opts.apps.proxy;
    if (!app.lane) return undefined;
    const laneApp = { lane: app.lane.bind(app) };
    return {
      guard: this.guard,
      app: laneApp,
      route: (r, rid, ip, scheme) => this.laneRoute(r, rid, ip, scheme),
      began: () => void this.inflight++,
      ended: (status, t0, whole) => {
        if (--this.inflight === 0) this.drained?.();
        if (status === undefined) return;
        metrics.httpRequest('site', status);
        if (whole) metrics.proxyAnswered((performance.now() - t0) / 1000);
      },
      stopping: () => this.stopping,
      keepAliveTimeout: this.keepAliveTimeout,
    };
  }

  /** A lane head's target when it is a site's: its request info; undefined sends it to node's server. */
  private laneRoute(r: LaneRequest, rid: string | undefined, ip: string, scheme: 'http' | 'https'): (RequestInfo & { slug: string }) | undefined {
    if (this.stopping) return undefined;
    if (scheme === 'http' && (this.opts.http.redirect || (this.opts.acmeChallenge && r.target.startsWith('/.well-known/acme-challenge/')))) return undefined;
    const info: RequestInfo = { host: hostOf(r.host), scheme, requestId: newRequestId(rid), ip };
    const target = aliased(route(info.host, this.opts.domain), info, this.opts.domain, this.opts.aliases);
    return target.app === 'proxy' ? { ...info, slug: target.slug } : undefined;
  }

  private onSession(s: ServerHttp2Session, bound: { max: number; windowMs: number }): void {
    this.sessions.add(s);
    s.on('close', () => this.sessions.delete(s));
    s.on('error', noop);
    const conn = ConnGuard.of(s.socket);
    // TLS sockets are half-open (for HTTP/1.1 clients that shut their side): a client's FIN ends an HTTP/2 session.
    // Its open streams get a short grace to finish; a peer that went away sends no more window updates, so a
    // stream blocked on flow control would otherwise hold the session (and its server's answer) forever.
    conn?.tls?.once('end', () => {
      s.close();
      if (!s.destroyed) setTimeout(() => s.destroy(), H2_FIN_GRACE_MS).unref();
    });
    const watch = boundResets(s, bound, (resets) =>
      this.opts.log.info('HTTP/2 session ended: too many stream resets', { ip: conn?.sock.remoteAddress, resets }),
    );
    s.on('stream', (stream) => {
      if (conn) stream.once('close', this.guard.streamOpened(conn));
      watch(stream);
    });
  }

  private info(req: Req, scheme: 'http' | 'https'): [RequestInfo, unknown] {
    let n: Named = { host: undefined, rid: undefined };
    let refused: unknown;
    try {
      n = named(req);
    } catch (e) {
      refused = e;
    }
    const info: RequestInfo = { host: hostOf(n.host), scheme, requestId: newRequestId(n.rid), ip: req.socket?.remoteAddress ?? '' };
    // the request the lane already forwarded: its id, and the failure to answer instead of forwarding it again
    const conn = req.httpVersionMajor < 2 ? ConnGuard.of(req.socket) : undefined;
    const replay = conn?.replay;
    if (replay) {
      conn.replay = undefined;
      info.requestId = replay.requestId;
      if (replay.failure) info.failure = replay.failure;
    }
    return [info, refused];
  }

  private onRequest(req: Req, res: Res, scheme: 'http' | 'https'): void {
    this.inflight++;
    const conn = req.httpVersionMajor < 2 ? ConnGuard.of(req.socket) : undefined;
    if (conn) this.guard.requestStarted(conn, res as ServerResponse);
    const t0 = performance.now();
    const seen = { kind: 'other' as HostKind };
    res.on('close', () => {
      if (conn) this.guard.requestEnded(conn);
      if (--this.inflight === 0) this.drained?.();
      metrics.httpRequest(seen.kind, res.statusCode);
      if (seen.kind === 'site' && res.writableFinished) metrics.proxyAnswered((performance.now() - t0) / 1000);
    });
    req.on('error', noop);
    res.on('error', noop);
    const [info, refused] = this.info(req, scheme);
    const challenge = scheme === 'http' && req.method === 'GET' ? this.opts.acmeChallenge?.(req.url, info.ip) : undefined;
    if (typeof challenge === 'string') return answerChallenge(res, challenge);
    // cluster mode: another host may hold the token; an unknown one goes on to the site
    if (challenge) return void challenge.then((ka) => (ka === undefined ? this.handle(req, res, scheme, info, refused, seen) : answerChallenge(res, ka)));
    this.handle(req, res, scheme, info, refused, seen);
  }

  /** Routes a request by Host to its app (after the ACME challenge check). */
  private handle(req: Req, res: Res, scheme: 'http' | 'https', info: RequestInfo, refused: unknown, seen: { kind: HostKind }): void {
    try {
      // node then answers with Connection: close and closes after it (no header set here: see below)
      if ((this.stopping || refused) && 'shouldKeepAlive' in res) res.shouldKeepAlive = false;
      if (refused) throw refused;
      const target =
        scheme === 'http' && this.opts.http.redirect ? undefined : aliased(route(info.host, this.opts.domain), info, this.opts.domain, this.opts.aliases);
      if (target) seen.kind = KIND[target.app];
      // The proxy adds the id to what it sends itself: a forwarded answer's head is then written
      // in one step (node's writeHead is slower once a header was set before it).
      if (target?.app !== 'proxy') res.setHeader('x-request-id', info.requestId);
      if (!target) return this.redirect(req, res, info.host);
      const app = target.app === 'none' ? undefined : this.opts.apps[target.app];
      if (!app) throw this.unknownHost(info.host, scheme);
      // most answers start synchronously; only a returned promise needs watching
      const pending = app.handle(req, res, info);
      if (pending) pending.catch((err: unknown) => this.failed(res, err, info));
    } catch (err) {
      this.failed(res, err, info);
    }
  }

  private failed(res: Res, err: unknown, info: RequestInfo): void {
    if (!res.headersSent) res.setHeader('x-request-id', info.requestId);
    sendReply(res, errorReply(err, info.requestId, this.opts.log));
  }

  private unknownHost(host: string, scheme: string): AppError {
    const d = this.opts.domain;
    if (!host) return AppError.of('missing_host', 'the request has no Host header');
    return scheme === 'https'
      ? AppError.of('unknown_host', `this daemon serves ${d}, api.${d}, verify.${d} and <slug>.${d}, not ${host.slice(0, 100)}`, { kind: 'misdirected' })
      : AppError.of('unknown_host', `this daemon serves ${d}, api.${d}, verify.${d} and <slug>.${d}, not ${host.slice(0, 100)}`);
  }

  private redirect(req: Req, res: Res, host: string): void {
    const https = this.ports.https;
    const port = https === 443 ? '' : `:${https}`;
    const safeHost = /^[a-z0-9.-]+$/.test(host) ? host : this.opts.domain;
    const location = `https://${safeHost}${port}${(req.url ?? '/').startsWith('/') ? req.url : '/'}`;
    sendReply(res, appErrorReply(AppError.of('use_https', `this service is served at ${location}`, { headers: { location } })));
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, scheme: 'http' | 'https'): void {
    socket.on('error', () => {});
    const conn = ConnGuard.of(socket);
    if (conn) this.guard.taken(conn);
    const [info, refused] = this.info(req, scheme);
    if (refused instanceof AppError) return rawError(socket, refused, { requestId: info.requestId });
    const target = aliased(route(info.host, this.opts.domain), info, this.opts.domain, this.opts.aliases);
    const hosting = this.opts.apps.hosting;
    if (target.app === 'hosting' && hosting.upgrade && !(scheme === 'http' && this.opts.http.redirect)) {
      try {
        return hosting.upgrade(req, socket, head, info);
      } catch (e) {
        this.opts.log.error('upgrade failed', { err: e });
      }
    }
    if (target.app === 'proxy' && this.opts.apps.proxy.upgrade && !(scheme === 'http' && this.opts.http.redirect)) {
      try {
        return this.opts.apps.proxy.upgrade(req, socket, head, { ...info, slug: target.slug });
      } catch (e) {
        this.opts.log.error('upgrade failed', { err: e });
      }
    }
    rawError(
      socket,
      AppError.of('upgrade_not_supported', 'WebSocket upgrades are accepted only on <slug> hosts and at /servers/{id}/exec of the API', { kind: 'not_found' }),
      {
        requestId: info.requestId,
      },
    );
  }

  /** Stops accepting, lets in-flight requests finish until the deadline, then closes the rest. */
  async stop(deadlineMs: number): Promise<void> {
    this.stopping = true;
    const closed = Promise.all(
      [this.front.https, this.front.http].map((s) => (s?.listening ? new Promise<void>((r) => s.close(() => r())) : Promise.resolve())),
    );
    this.guard?.closeIdle();
    for (const s of this.sessions) s.close();
    if (this.inflight > 0) {
      await Promise.race([new Promise<void>((r) => (this.drained = r)), new Promise<void>((r) => setTimeout(r, deadlineMs).unref())]);
    }
    for (const s of this.sessions) s.destroy();
    this.guard?.destroyAll();
    await closed;
  }
}

function noop(): void {}

/** A connection's peer, the same on the TCP socket and the TLS socket over it. */
function listen(server: NetServer, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (e: Error) => reject(AppError.of('listen_failed', `cannot listen on ${host}:${port}: ${e.message}`));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      server.on('error', () => {});
      resolve();
    });
  });
}

function answerChallenge(res: Res, keyAuthorization: string): void {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(keyAuthorization) }).end(keyAuthorization);
}
