// The edge: one HTTPS listener (HTTP/2 with HTTP/1.1 fallback, SNI) and one plain HTTP listener
// (redirect in production, direct serving with the embedded defaults). It assigns request ids,
// dispatches by Host, passes WebSocket upgrades on, keeps misbehaving clients from hurting
// anyone else, and drains in-flight requests on stop.

import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { createSecureServer, type Http2SecureServer, type Http2Session } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '../log/index.js';
import { errorReply, newRequestId, sendReply, type HttpApp, type Req, type RequestInfo, type Res } from '../http/index.js';
import { AppError } from '../errors.js';
import { hostOf, route } from './dispatch.js';
import type { TlsManager } from './tls.js';

export interface UpgradeApp {
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo & { slug: string }): void;
}

export interface EdgeApps {
  hosting: HttpApp;
  verify: HttpApp;
  /** Serves <slug>.{domain}; receives WebSocket upgrades for those hosts too. */
  proxy: HttpApp & Partial<UpgradeApp>;
}

export interface EdgeOptions {
  domain: string;
  http: { host: string; port: number; redirect: boolean };
  https: { host: string; port: number };
  tls: TlsManager;
  apps: EdgeApps;
  log: Logger;
}

export class Edge {
  private https?: Http2SecureServer;
  private http?: HttpServer;
  private readonly sockets = new Set<Socket>();
  private readonly sessions = new Set<Http2Session>();
  private inflight = 0;
  private drained?: () => void;
  private stopping = false;

  constructor(private readonly opts: EdgeOptions) {}

  get ports(): { http: number; https: number } {
    return {
      http: (this.http?.address() as AddressInfo | null)?.port ?? 0,
      https: (this.https?.address() as AddressInfo | null)?.port ?? 0,
    };
  }

  async start(): Promise<void> {
    const { tls, log } = this.opts;
    this.https = createSecureServer(
      {
        allowHTTP1: true,
        SNICallback: (name, cb) => {
          try {
            cb(null, tls.contextFor(name));
          } catch (e) {
            log.warn('SNI failed', { name: String(name).slice(0, 100), err: (e as Error).message });
            cb(e as Error);
          }
        },
        settings: { enableConnectProtocol: false },
      },
      (req, res) => void this.onRequest(req, res, 'https'),
    );
    this.https.on('session', (s) => {
      this.sessions.add(s);
      s.on('close', () => this.sessions.delete(s));
      s.on('error', () => {});
    });
    this.https.setTimeout(120_000);
    this.http = createHttpServer({ requestTimeout: 0, headersTimeout: 30_000, keepAliveTimeout: 5_000 }, (req, res) =>
      void this.onRequest(req, res, 'http'),
    );
    this.http.setTimeout(120_000);
    for (const srv of [this.https, this.http] as const) {
      srv.on('connection', (s: Socket) => {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
      });
      srv.on('secureConnection', (s: Socket) => {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
      });
      srv.on('clientError', (err: Error, socket: Duplex) => {
        if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        else socket.destroy();
        log.debug('client error', { err: err.message });
      });
      srv.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
        this.onUpgrade(req, socket, head, srv === this.https ? 'https' : 'http'),
      );
    }
    this.https.on('tlsClientError', (err) => log.debug('TLS client error', { err: err.message }));
    await listen(this.https, this.opts.https.port, this.opts.https.host);
    try {
      await listen(this.http, this.opts.http.port, this.opts.http.host);
    } catch (e) {
      await new Promise((r) => this.https!.close(r));
      throw e;
    }
    log.info('edge listening', { https: this.ports.https, http: this.ports.http, domain: this.opts.domain });
  }

  private info(req: Req, scheme: 'http' | 'https'): RequestInfo {
    let host: string | string[] | undefined;
    let rid: string | string[] | undefined;
    if (req.httpVersionMajor >= 2) {
      host = req.headers[':authority'] ?? req.headers.host;
      rid = req.headers['x-request-id'];
    } else {
      // HTTP/1.1: read the two from the raw list (node builds req.headers only when asked)
      const raw = req.rawHeaders;
      for (let i = 0; i < raw.length; i += 2) {
        const n = raw[i];
        if (n.length === 4 && host === undefined && n.toLowerCase() === 'host') host = raw[i + 1];
        else if (n.length === 12 && rid === undefined && n.toLowerCase() === 'x-request-id') rid = raw[i + 1];
      }
    }
    return { host: hostOf(host), scheme, requestId: newRequestId(rid), ip: req.socket?.remoteAddress ?? '' };
  }

  private onRequest(req: Req, res: Res, scheme: 'http' | 'https'): void {
    this.inflight++;
    res.on('close', () => {
      if (--this.inflight === 0) this.drained?.();
    });
    req.on('error', noop);
    res.on('error', noop);
    const info = this.info(req, scheme);
    try {
      // node then answers with Connection: close and closes after it (no header set here: see below)
      if (this.stopping && 'shouldKeepAlive' in res) res.shouldKeepAlive = false;
      const target = scheme === 'http' && this.opts.http.redirect ? undefined : route(info.host, this.opts.domain);
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
    if (!host) return new AppError('bad_request', 'missing_host', 'the request has no Host header');
    return scheme === 'https'
      ? new AppError('misdirected', 'unknown_host', `this daemon serves ${d}, api.${d}, verify.${d} and <slug>.${d}, not ${host.slice(0, 100)}`)
      : new AppError('not_found', 'unknown_host', `this daemon serves ${d}, api.${d}, verify.${d} and <slug>.${d}, not ${host.slice(0, 100)}`);
  }

  private redirect(req: Req, res: Res, host: string): void {
    const https = this.ports.https;
    const port = https === 443 ? '' : `:${https}`;
    const safeHost = /^[a-z0-9.-]+$/.test(host) ? host : this.opts.domain;
    const location = `https://${safeHost}${port}${(req.url ?? '/').startsWith('/') ? req.url : '/'}`;
    sendReply(res, { status: 308, headers: { location }, body: { error: 'use_https', detail: `this service is served at ${location}` } });
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, scheme: 'http' | 'https'): void {
    socket.on('error', () => {});
    const info = this.info(req, scheme);
    const target = route(info.host, this.opts.domain);
    if (target.app === 'proxy' && this.opts.apps.proxy.upgrade && !(scheme === 'http' && this.opts.http.redirect)) {
      try {
        return this.opts.apps.proxy.upgrade(req, socket, head, { ...info, slug: target.slug });
      } catch (e) {
        this.opts.log.error('upgrade failed', { err: e });
      }
    }
    const body = JSON.stringify({ error: 'upgrade_not_supported', detail: 'WebSocket upgrades are accepted only on <slug> hosts' });
    socket.end(`HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  }

  /** Stops accepting, lets in-flight requests finish until the deadline, then closes the rest. */
  async stop(deadlineMs: number): Promise<void> {
    this.stopping = true;
    const closed = Promise.all(
      [this.https, this.http].map((s) => (s ? new Promise<void>((r) => s.close(() => r())) : Promise.resolve())),
    );
    this.http?.closeIdleConnections();
    for (const s of this.sessions) s.close();
    if (this.inflight > 0) {
      await Promise.race([
        new Promise<void>((r) => (this.drained = r)),
        new Promise<void>((r) => setTimeout(r, deadlineMs).unref()),
      ]);
    }
    for (const s of this.sessions) s.destroy();
    for (const s of this.sockets) s.destroy();
    await closed;
  }
}

function noop(): void {}

function listen(server: HttpServer | Http2SecureServer, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (e: Error) => reject(new AppError('unavailable', 'listen_failed', `cannot listen on ${host}:${port}: ${e.message}`));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      server.on('error', () => {});
      resolve();
    });
  });
}
