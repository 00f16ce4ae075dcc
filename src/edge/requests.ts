// The edge's requests once node's HTTP/1.1 or HTTP/2 server has parsed them (server.ts owns the
// listeners and connections): each gets a request id (the client's, or the one the lane already
// gave it) and is routed by Host (target.ts checks the host and makes absolute-form targets
// origin-form) to its app, after the ACME HTTP-01 answers on the plain listener and before the
// redirect to HTTPS; WebSocket upgrades are passed to the API or the site's proxy; what node's
// parser or the Host check refuses, and what an app throws, is answered with {error, detail}.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { appErrorReply, errorReply, newRequestId, rawError, sendReply, type Req, type RequestInfo, type Res } from '../http/index.js';
import { AppError } from '../errors.js';
import { metrics } from '../metrics/index.js';
import { hostOf, route } from './dispatch.js';
import { ConnGuard } from './guard.js';
import type { EdgeOptions } from './options.js';
import { aliased, named, type Named } from './target.js';

type HostKind = 'api' | 'verify' | 'site' | 'other';
const KIND = { hosting: 'api', verify: 'verify', proxy: 'site', none: 'other' } as const;

/** The edge's view the requests need (server.ts's Edge). */
export interface RequestContext {
  opts: EdgeOptions;
  /** The connections' guard (made when the edge starts). */
  guard(): ConnGuard;
  /** A request began / ended (the edge drains them on stop). */
  began(): void;
  ended(): void;
  stopping(): boolean;
  /** The HTTPS listener's port (the redirect's). */
  httpsPort(): number;
}

export class EdgeRequests {
  private readonly opts: EdgeOptions;

  constructor(private readonly c: RequestContext) {
    this.opts = c.opts;
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

  onRequest(req: Req, res: Res, scheme: 'http' | 'https'): void {
    this.c.began();
    const conn = req.httpVersionMajor < 2 ? ConnGuard.of(req.socket) : undefined;
    if (conn) this.c.guard().requestStarted(conn, res as ServerResponse);
    const t0 = performance.now();
    const seen = { kind: 'other' as HostKind };
    res.on('close', () => {
      if (conn) this.c.guard().requestEnded(conn);
      this.c.ended();
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
      if ((this.c.stopping() || refused) && 'shouldKeepAlive' in res) res.shouldKeepAlive = false;
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
    const https = this.c.httpsPort();
    const port = https === 443 ? '' : `:${https}`;
    const safeHost = /^[a-z0-9.-]+$/.test(host) ? host : this.opts.domain;
    const location = `https://${safeHost}${port}${(req.url ?? '/').startsWith('/') ? req.url : '/'}`;
    sendReply(res, appErrorReply(AppError.of('use_https', `this service is served at ${location}`, { headers: { location } })));
  }

  onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, scheme: 'http' | 'https'): void {
    socket.on('error', () => {});
    const conn = ConnGuard.of(socket);
    if (conn) this.c.guard().taken(conn);
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
}

function noop(): void {}

function answerChallenge(res: Res, keyAuthorization: string): void {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(keyAuthorization) }).end(keyAuthorization);
}
