// API requests over the channel, the owner's side (the sender's is sender-api.ts): the owner's
// channel server hands streams marked `x-rootbox-api: 1` to its API app, not to the proxy, as if
// their client had come here (`info.forwarded` names the sender: the app never forwards them
// again). A second hop, or a request from this host itself, is a loop; a request naming a server
// this host does not run at the epoch the sender saw is answered "not here".

import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { AppError } from '../errors.js';
import { errorReply, rawError, sendReply, type RequestInfo } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { Placements } from './lookup.js';
import type { ApiApp } from './sender-api.js';
import { handshakeOf, StreamSocket } from './wire-tunnel.js';
import { dropOwn, H, MAX_HOPS, NOT_HERE } from './wire.js';

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
      const here = placed ? { host: placed.host, epoch: placed.epoch } : {};
      d.log.debug('not here: an API request for a server this host does not run at the epoch the sender saw', {
        server,
        epoch: h[H.epoch],
        has: d.has(server),
        ...here,
        rid: info.requestId,
      });
      return void res.writeHead(NOT_HERE, { [H.notHere]: '1' }).end();
    }
  }
  const counted = one(h[H.counted]) === '1'; // the sender's routes counted it against the rate limits; otherwise this host's do
  dropOwn(req);
  const forwarded: RequestInfo = { ...info, forwarded: peer, ...(counted ? { counted } : {}) };
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
