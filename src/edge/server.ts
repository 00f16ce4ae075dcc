// The edge: one HTTPS listener (HTTP/2 with HTTP/1.1 fallback, SNI) and one plain HTTP listener
// (redirect in production, direct serving with the embedded defaults). It owns its listening
// sockets and admits each connection (per-source and total caps, request-head deadline:
// guard.ts) before HTTP or TLS sees it. TLS is its own too (tls.ts's contexts by SNI): the
// handshake's ALPN choice sends a connection to an HTTP/2 server (h2) or to the lane and node's
// HTTP/1.1 server (http/1.1), each given the TLS socket as a connection through public APIs
// (handshake.ts: a TLS server's 'secureConnection', `emit('connection')`). What node's servers
// parse goes to requests.ts (request ids, Host dispatch, upgrades, {error, detail} answers). It
// bounds HTTP/2 stream resets (resets.ts), lets a client that shut its write side after its
// request still get the answer, and drains in-flight requests on stop.

import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { createServer as createHttp2Server, type Http2Server, type ServerHttp2Session } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { newRequestId, type LaneRequest, type RequestInfo } from '../http/index.js';
import { AppError } from '../errors.js';
import { metrics } from '../metrics/index.js';
import { hostOf, route } from './dispatch.js';
import { ConnGuard } from './guard.js';
import { Handshakes } from './handshake.js';
import { LaneConnection, type LaneContext } from './lane.js';
import { boundResets } from './resets.js';
import { HTTP_DEFAULTS, HTTPS_DEFAULTS, type EdgeOptions } from './options.js';
import { EdgeRequests } from './requests.js';
import { aliased } from './target.js';
import { answerRefusals } from './wire.js';

export type { EdgeApps, EdgeOptions } from './options.js';

/** How long an HTTP/2 session's streams may run on after the client's FIN (HTTP/2 has no half-close; a FIN means the peer left) before the session is destroyed. */
const H2_FIN_GRACE_MS = 250;

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
  /** What node's servers parsed: routed by Host (requests.ts). */
  private readonly requests: EdgeRequests;

  constructor(private readonly opts: EdgeOptions) {
    this.keepAliveTimeout = opts.http.keepAliveTimeout ?? 5_000;
    this.requests = new EdgeRequests({
      opts,
      guard: () => this.guard,
      began: () => void this.inflight++,
      ended: () => {
        if (--this.inflight === 0) this.drained?.();
      },
      stopping: () => this.stopping,
      httpsPort: () => this.ports.https,
    });
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
      (req, res) => void this.requests.onRequest(req, res, 'https'),
    );
    this.h2.on('session', (s) => this.onSession(s, { max: hs.maxStreamResets, windowMs: hs.streamResetWindow }));
    this.h2.setTimeout(120_000);
    this.https1 = createHttpServer(
      { requestTimeout: 0, headersTimeout: h.headerTimeout, keepAliveTimeout: this.keepAliveTimeout, requireHostHeader: false },
      (req, res) => void this.requests.onRequest(req, res, 'https'),
    );
    this.https1.setTimeout(120_000);
    this.lane = this.laneContext();
    this.handshakes = new Handshakes(
      tls,
      log,
      (t, raw) => {
        if (raw) this.guard.secured(t, raw);
        this.dispatch(t);
      },
      (name) => this.named(name),
    );
    this.http = createHttpServer(
      { requestTimeout: 0, headersTimeout: h.headerTimeout, keepAliveTimeout: this.keepAliveTimeout, requireHostHeader: false },
      (req, res) => void this.requests.onRequest(req, res, 'http'),
    );
    this.http.setTimeout(120_000);
    answerRefusals(this.h2, log, (socket) => ConnGuard.of(socket));
    for (const srv of [this.https1, this.http] as const) {
      // a client's FIN after its request ends only its side: the answer still goes out, then we close
      (srv as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
      answerRefusals(srv, log, (socket) => ConnGuard.of(socket));
      srv.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
        this.requests.onUpgrade(req, socket, head, srv === this.https1 ? 'https' : 'http'),
      );
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

  /** A ClientHello named a server's host (its subdomain or one of its own domains): the proxy is
   *  told at once (a dozing server thaws while the handshake goes on). */
  private named(name: string): void {
    const proxy = this.opts.apps.proxy;
    if (!proxy.hello) return;
    const info = { host: hostOf(name) };
    const t = aliased(route(info.host, this.opts.domain), info, this.opts.domain, this.opts.aliases);
    if (t.app === 'proxy') proxy.hello(t.slug);
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

/** Listens on `host`:`port`; a failure is answered as listen_failed. */
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
