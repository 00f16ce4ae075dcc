// API requests over the channel (issue 29 item 2): a request to this host's API that acts on a
// server another host runs (`/servers/{id}/…`, the MCP tools on it), or a create sent on to
// another host (hosting's choice of a host, hostchoice.ts), goes to that host's API app as if its client had come there — method, path,
// headers with the Authorization (accounts and keys are shared through the registry: the owner
// authenticates and checks ownership itself), the body streamed, the client's address, scheme
// and request id, one hop — and its answer is relayed as it comes. WebSocket upgrades (exec over
// a WebSocket) take the same way, the stream then carrying both byte streams (wire-tunnel.ts).
//
// The owner's channel server hands streams marked `x-rootbox-api: 1` to its API app, not to the
// proxy (owner-api.ts). A request naming the server it acts on carries the placement epoch the
// sender saw: an owner that does not run that server at that epoch answers "not here", and the
// sender asks the registry once and sends again (a body kept up to `retryBody` within the retry
// budget of its source and of the host, sender-body.ts; a larger one, or one beyond the budget, was
// streamed and is not retried: 503 host_unavailable). A host that is down or cannot be reached
// answers 503 host_unavailable at once; an address that leads back here, 502 forward_loop.

import type { IncomingMessage } from 'node:http';
import type { OutgoingHttpHeaders } from 'node:http2';
import type { Duplex, Readable } from 'node:stream';
import { AppError } from '../errors.js';
import { errorReply, rawError, sendReply, withBody, type HttpApp, type Req, type RequestInfo, type Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { ChannelHealth } from './sender-health.js';
import type { Placements, PlacementToRoute } from './lookup.js';
import { hostUnavailable, openForwarded, readBody, relay, sendForwarded, type Body, type RetryKeep } from './sender-outbound.js';
import { CANCEL, type Peers } from './sender-peers.js';
import { H, NOT_HERE } from './wire.js';

/** The API app of a host: its routes and its WebSocket upgrades (exec over a WebSocket). */
export interface ApiApp extends HttpApp {
  upgrade?(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo): void;
}

export interface ApiForwardOptions {
  /** The server the request acts on, as this host's cache places it: the owner answers "not here"
   *  unless it runs that server at that epoch, and the request is sent once more after a fresh look. */
  server?: Pick<PlacementToRoute, 'serverId' | 'slug' | 'epoch'>;
  /** The body, when this host already read it from the request (its stream is not read again). */
  body?: Buffer;
  /** This host's routes counted the request against the API's rate limits already (a create sent
   *  on, a part of a server list): the owner does not. Otherwise the owner counts it, by the
   *  client's source the channel carries and by its key once authenticated: exactly once. */
  counted?: boolean;
}

export interface ApiForwarderDeps {
  peers: Peers;
  placements: Placements;
  self: string;
  /** Bodies kept for a retry after "not here": cluster.forwardRetryBody each, within the budget. */
  retry: RetryKeep;
  /** This host's own API app: answers a request whose server turned out to be here, or gone. */
  local: () => ApiApp | undefined;
  log: Logger;
  health?: ChannelHealth;
}

/** A request for the owner's API app, and the server it acts on (its epoch checked there). */
const toApi = (server: ApiForwardOptions['server'], counted?: boolean): OutgoingHttpHeaders => ({
  [H.api]: '1',
  ...(server ? { [H.server]: server.serverId, [H.epoch]: String(server.epoch) } : {}),
  ...(counted ? { [H.counted]: '1' } : {}),
});

export class ApiForwarder {
  constructor(private readonly d: ApiForwarderDeps) {}

  /** Sends the API request to `host`'s API app and relays its answer (errors as `{error, detail}` JSON). */
  async forward(host: string, req: Req, res: Res, info: RequestInfo, o: ApiForwardOptions = {}): Promise<void> {
    const body = await readBody(req, this.d.retry, info.ip, o.body);
    if (!body) return void (res as { destroy?: () => void }).destroy?.(); // the client went away mid-body
    try {
      await this.send(host, req, res, info, o, body);
    } finally {
      body.release();
    }
  }

  private async send(host: string, req: Req, res: Res, info: RequestInfo, o: ApiForwardOptions, body: Body): Promise<void> {
    const fail = (err: AppError) => {
      res.setHeader('x-request-id', info.requestId);
      sendReply(res, errorReply(err, info.requestId, this.d.log), req.method === 'HEAD');
    };
    let answer = await sendForwarded(this.d, host, req, info, toApi(o.server, o.counted), body);
    if (answer instanceof AppError) return fail(answer);
    if (Number(answer.headers[':status']) === NOT_HERE && o.server) {
      answer.stream.close(CANCEL);
      if (body.rest) return fail(hostUnavailable(host, 'no longer runs it'));
      const now = await this.relocate(host, o.server);
      const local = this.d.local();
      // gone, or here now: this host's API answers (404 server_not_found, or the server itself)
      if (now === 'here' && local) return local.handle(withBody(req, body.chunks, false), res, info);
      if (!now || now === 'here') return fail(hostUnavailable(host, 'no longer runs it'));
      answer = await sendForwarded(this.d, now.host, req, info, toApi(now, o.counted), body);
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
    const stream = await openForwarded(this.d, host, req, info, { ...toApi(o.server, o.counted), [H.upgrade]: String(req.headers.upgrade ?? '') }, false);
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
        return this.tunnel(now.host, req, socket, head, info, { server: now, counted: o.counted }, false);
      });
    });
  }

  /** After "not here": where the server is now — another host, 'here' (or gone: this host's API answers), or undefined (no news). */
  private async relocate(host: string, server: NonNullable<ApiForwardOptions['server']>): Promise<PlacementToRoute | 'here' | undefined> {
    const read = await this.d.placements.fresh(server.slug).then(
      () => true,
      () => false,
    );
    const now = this.d.placements.byServer(server.serverId);
    if (!now || now.host === this.d.self) return 'here';
    if (now.host !== host || now.epoch !== server.epoch) return now;
    // the owner refused what the registry still says: worth a line (the owner checks against its
    // own view, lookup.ts ownersView); the client gets 503 host_unavailable
    this.d.log.warn('the owner answered "not here" for a server the registry places on it at the epoch sent', {
      host,
      server: server.serverId,
      epoch: server.epoch,
      registryRead: read,
    });
    return undefined;
  }
}
