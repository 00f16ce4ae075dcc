// API requests over the channel (issue 29 item 2): a request to this host's API that acts on a
// server another host runs (`/servers/{id}/…`, the MCP tools on it), or a create placed on
// another host, goes to that host's API app as if its client had come there — method, path,
// headers with the Authorization (accounts and keys are shared through the registry: the owner
// authenticates and checks ownership itself), the body streamed, the client's address, scheme
// and request id, one hop — and its answer is relayed as it comes. WebSocket upgrades (exec over
// a WebSocket) take the same way, the stream then carrying both byte streams (tunnel.ts).
//
// The owner's channel server hands streams marked `x-rootbox-api: 1` to its API app, not to the
// proxy (`answerApi`). A request naming the server it acts on carries the placement epoch the
// sender saw: an owner that does not run that server at that epoch answers "not here", and the
// sender asks the registry once and sends again (a body kept up to `retryBody`; a larger one was
// streamed and is not retried: 503 host_unavailable). A host that is down or cannot be reached
// answers 503 host_unavailable at once; an address that leads back here, 502 forward_loop.

import type { IncomingMessage } from 'node:http';
import type { ClientHttp2Stream, Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import type { Duplex, Readable } from 'node:stream';
import { AppError } from '../errors.js';
import { errorReply, rawError, sendReply, withBody, type HttpApp, type Req, type RequestInfo, type Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { buffer, hasBody } from './body.js';
import type { ChannelHealth } from './health.js';
import type { Placements, PlacementView } from './lookup.js';
import { CANCEL, PeerError, type Peers } from './peers.js';
import { handshakeOf, StreamSocket } from './tunnel.js';
import { answerHeaders, channelHeaders, H, MAX_HOPS, NOT_HERE } from './wire.js';

/** The API app of a host: its routes and its WebSocket upgrades (exec over a WebSocket). */
export interface ApiApp extends HttpApp {
  upgrade?(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo): void;
}

export interface ApiForwardOptions {
  /** The server the request acts on, as this host's cache places it: the owner answers "not here"
   *  unless it runs that server at that epoch, and the request is sent once more after a fresh look. */
  server?: Pick<PlacementView, 'serverId' | 'slug' | 'epoch'>;
  /** The body, when this host already read it from the request (its stream is not read again). */
  body?: Buffer;
}

export interface ApiForwarderDeps {
  peers: Peers;
  placements: Placements;
  self: string;
  /** Bodies kept for a retry after "not here" up to this many bytes (cluster.forwardRetryBody). */
  retryBody: number;
  /** This host's own API app: answers a request whose server turned out to be here, or gone. */
  local: () => ApiApp | undefined;
  log: Logger;
  health?: ChannelHealth;
}

interface Body {
  chunks: Buffer[];
  /** The rest of a body too large to keep: streamed, no retry. */
  rest?: Readable;
}

type Answer = { headers: IncomingHttpHeaders; stream: ClientHttp2Stream };

export const hostUnavailable = (host: string, why: string) =>
  AppError.of('host_unavailable', `the host that runs this server (${host}) ${why}; try again shortly`, { retryAfter: 2 });

export class ApiForwarder {
  constructor(private readonly d: ApiForwarderDeps) {}

  /** Sends the API request to `host`'s API app and relays its answer (errors as `{error, detail}` JSON). */
  async forward(host: string, req: Req, res: Res, info: RequestInfo, o: ApiForwardOptions = {}): Promise<void> {
    let body: Body = { chunks: o.body?.length ? [o.body] : [] };
    if (!o.body && hasBody(req)) {
      const b = await buffer(req as Readable, this.d.retryBody);
      body = { chunks: b.chunks, rest: b.whole ? undefined : (req as Readable) };
    }
    const fail = (err: AppError) => {
      res.setHeader('x-request-id', info.requestId);
      sendReply(res, errorReply(err, info.requestId, this.d.log), req.method === 'HEAD');
    };
    let answer = await this.send(host, req, info, o.server, body);
    if (answer instanceof AppError) return fail(answer);
    if (Number(answer.headers[':status']) === NOT_HERE && o.server) {
      answer.stream.close(CANCEL);
      if (body.rest) return fail(hostUnavailable(host, 'no longer runs it'));
      const now = await this.relocate(host, o.server);
      const local = this.d.local();
      // gone, or here now: this host's API answers (404 server_not_found, or the server itself)
      if (now === 'here' && local) return local.handle(withBody(req, body.chunks, false), res, info);
      if (!now || now === 'here') return fail(hostUnavailable(host, 'no longer runs it'));
      answer = await this.send(now.host, req, info, now, body);
      if (answer instanceof AppError) return fail(answer);
      if (Number(answer.headers[':status']) === NOT_HERE) {
        answer.stream.close(CANCEL);
        return fail(hostUnavailable(now.host, 'no longer runs it'));
      }
    }
    relay(answer, res);
  }

  /** A WebSocket handshake to `host`'s API app: the client's bytes and the owner's, both ways over one stream. */
  upgrade(host: string, req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo, o: ApiForwardOptions = {}): void {
    void this.tunnel(host, req, socket, head, info, o).catch((e: unknown) => {
      this.d.log.error('forwarded API upgrade failed', { err: e, rid: info.requestId });
      socket.destroy();
    });
  }

  private async tunnel(host: string, req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo, o: ApiForwardOptions, again = true): Promise<void> {
    const stream = await this.open(host, req, info, o.server, { [H.upgrade]: String(req.headers.upgrade ?? '') }, false);
    if (stream instanceof AppError) return rawError(socket, stream, { requestId: info.requestId });
    const onError = () => socket.destroy();
    const onClose = () => {
      if (!stream.closed) stream.close(CANCEL);
    };
    stream.on('error', onError);
    socket.on('error', () => {});
    socket.on('close', onClose);
    stream.once('response', (h) => {
      const status = Number(h[':status']);
      if (status === 200) {
        (stream as Readable).pipe(socket);
        if (head.length) stream.write(head);
        return void socket.pipe(stream);
      }
      stream.off('error', onError).on('error', () => {});
      socket.off('close', onClose);
      stream.close(CANCEL);
      if (status !== NOT_HERE || !o.server || !again) return rawError(socket, hostUnavailable(host, 'no longer runs it'), { requestId: info.requestId });
      // a stale placement: one fresh look, then the owner now, or this host's API (here now, or gone)
      void this.relocate(host, o.server).then((now) => {
        const local = this.d.local()?.upgrade;
        if (now === 'here') return local ? local(req, socket, head, info) : socket.destroy();
        if (!now) return rawError(socket, hostUnavailable(host, 'no longer runs it'), { requestId: info.requestId });
        return this.tunnel(now.host, req, socket, head, info, { server: now }, false);
      });
    });
  }

  /** After "not here": where the server is now — another host, 'here' (or gone: this host's API answers), or undefined (no news). */
  private async relocate(host: string, server: NonNullable<ApiForwardOptions['server']>): Promise<PlacementView | 'here' | undefined> {
    await this.d.placements.fresh(server.slug).catch(() => undefined);
    const now = this.d.placements.byServer(server.serverId);
    if (!now || now.host === this.d.self) return 'here';
    return now.host === host && now.epoch === server.epoch ? undefined : now;
  }

  /** The request over the channel to `host`; its answer head, or why there is none. */
  private async send(host: string, req: Req, info: RequestInfo, server: ApiForwardOptions['server'], body: Body): Promise<Answer | AppError> {
    const stream = await this.open(host, req, info, server, {}, !body.chunks.length && !body.rest);
    if (stream instanceof AppError) return (this.d.health?.refused(host, stream.code), stream);
    for (const c of body.chunks) stream.write(c);
    if (body.rest) body.rest.pipe(stream);
    else if (body.chunks.length) stream.end();
    return new Promise((resolve) => {
      let settled = false;
      stream.once('response', (headers) => {
        settled = true;
        this.d.health?.forwarded(host, Number(headers[':status']) === NOT_HERE ? 'not_here' : 'answered');
        stream.on('error', () => {});
        resolve({ headers, stream });
      });
      const onError = (e?: Error) => void (settled || ((settled = true), this.d.health?.stream(host, e), resolve(hostUnavailable(host, 'cannot be reached'))));
      stream.once('error', onError);
      stream.once('close', onError);
    });
  }

  private async open(
    host: string,
    req: Req | IncomingMessage,
    info: RequestInfo,
    server: ApiForwardOptions['server'],
    extra: OutgoingHttpHeaders,
    endStream: boolean,
  ): Promise<ClientHttp2Stream | AppError> {
    const peer = this.d.placements.host(host);
    if (!peer || !peer.up) return hostUnavailable(host, 'is down');
    let session;
    try {
      session = await this.d.peers.session(host, peer.advertise);
    } catch (e) {
      if (e instanceof PeerError && e.loop) {
        this.d.log.error('forwarding loop: the channel address of a host leads back here', { peer: host, advertise: peer.advertise });
        return AppError.of('forward_loop', `the channel address of ${host} leads back to ${this.d.self} (request ${info.requestId})`);
      }
      this.d.log.warn('channel unreachable', { peer: host, advertise: peer.advertise, detail: (e as Error).message });
      return hostUnavailable(host, 'cannot be reached');
    }
    const headers: OutgoingHttpHeaders = {
      ...channelHeaders(req.headers as IncomingHttpHeaders),
      ':method': req.method ?? 'GET',
      ':path': req.url ?? '/',
      ':authority': (req.headers.host ?? (req.headers as IncomingHttpHeaders)[':authority'] ?? info.host) as string,
      ':scheme': 'https',
      [H.api]: '1',
      [H.site]: info.host,
      [H.ip]: info.ip,
      [H.scheme]: info.scheme,
      [H.rid]: info.requestId,
      [H.hops]: '1',
      ...(server ? { [H.server]: server.serverId, [H.epoch]: String(server.epoch) } : {}),
      ...extra,
    };
    try {
      return session.request(headers, { endStream });
    } catch (e) {
      this.d.log.warn('channel request refused', { peer: host, detail: (e as Error).message });
      return hostUnavailable(host, 'cannot be reached');
    }
  }
}

/** The owner's answer, streamed to the client as it comes. */
function relay(a: Answer, res: Res): void {
  const { headers, stream } = a;
  res.on('close', () => {
    if (!stream.closed) stream.close(CANCEL);
  });
  stream.on('error', () => (res as { destroy?: () => void }).destroy?.());
  stream.on('aborted', () => (res as { destroy?: () => void }).destroy?.());
  res.writeHead(Number(headers[':status']), answerHeaders(headers) as Record<string, string>);
  (stream as Readable).pipe(res as unknown as NodeJS.WritableStream);
}

export interface ApiOwnerDeps {
  app: ApiApp;
  /** This host's own server by id (its store). */
  has(serverId: string): boolean;
  placements: Pick<Placements, 'byServer'>;
  self: string;
  log: Logger;
}

const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/**
 * The owner's side: a stream marked `x-rootbox-api` answered by this host's API app, as if its
 * client had come here (`info.forwarded` names the sender: the app never forwards it again). A
 * second hop, or a request from this host itself, is a loop; a server this host does not run at
 * the epoch the sender saw, "not here".
 */
export function answerApi(d: ApiOwnerDeps, req: Http2ServerRequest, res: Http2ServerResponse, info: RequestInfo, peer: string | undefined): void {
  const h = req.headers;
  const upgrade = one(h[H.upgrade]);
  const refuse = (err: AppError) => {
    if (upgrade) {
      res.writeHead(200);
      return rawError(new StreamSocket(req, req.stream, info.ip), err, { requestId: info.requestId });
    }
    res.setHeader('x-request-id', info.requestId);
    sendReply(res, errorReply(err, info.requestId, d.log));
  };
  if (!peer || peer === d.self || Number(h[H.hops] ?? 0) > MAX_HOPS) {
    d.log.warn('forwarding loop refused', { from: peer, hops: h[H.hops], rid: info.requestId });
    return refuse(AppError.of('forward_loop', `the request came back to ${d.self}, which it had passed already (request ${info.requestId})`));
  }
  const server = one(h[H.server]);
  if (server !== undefined) {
    const placed = d.placements.byServer(server);
    if (!d.has(server) || (placed && (placed.host !== d.self || placed.epoch !== Number(h[H.epoch])))) {
      return void res.writeHead(NOT_HERE, { [H.notHere]: '1' }).end();
    }
  }
  for (const name of Object.keys(h)) if (name.startsWith('x-rootbox-')) delete h[name];
  const forwarded: RequestInfo = { ...info, forwarded: peer };
  if (upgrade) {
    res.writeHead(200);
    const socket = new StreamSocket(req, req.stream, info.ip);
    socket.on('error', () => {});
    if (!d.app.upgrade) return rawError(socket, AppError.of('upgrade_not_supported', 'this API takes no WebSocket upgrades'), { requestId: info.requestId });
    return d.app.upgrade(handshakeOf(req, socket, upgrade, one(h[':authority']) ?? info.host), socket, Buffer.alloc(0), forwarded);
  }
  try {
    const pending = d.app.handle(req, res, forwarded);
    if (pending) pending.catch((err: unknown) => sendReply(res, errorReply(err, info.requestId, d.log)));
  } catch (err) {
    sendReply(res, errorReply(err, info.requestId, d.log));
  }
}
