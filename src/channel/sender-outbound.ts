// What every sender over the channel shares (the proxy's front, the API forwarder, SSH): the
// session to a peer host or why there is none (down: its lease ran out and its channel does not
// answer, 503 host_unavailable at once, a session tried in the background for the next request;
// an address leading back here: 502 forward_loop; unreachable: 503), a forwarded request's stream
// with the channel's headers (the client's head, who the client is, one hop), its answer head,
// and that answer relayed to the client as it comes.

import type { IncomingMessage } from 'node:http';
import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import type { Readable } from 'node:stream';
import { AppError } from '../errors.js';
import type { Req, RequestInfo, Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { buffer, hasBody, type RetryBudget } from './sender-body.js';
import type { ChannelHealth } from './sender-health.js';
import type { Placements } from './lookup.js';
import { CANCEL, PeerError, type Peers } from './sender-peers.js';
import { answerHeaders, channelHeaders, H, NOT_HERE } from './wire.js';

export interface OutboundDeps {
  peers: Peers;
  placements: Pick<Placements, 'host'>;
  self: string;
  log: Logger;
  health?: ChannelHealth;
}

/** A request body: kept in memory up to the retry cap (within the budget), or streamed (no retry then). */
export interface Body {
  chunks: Buffer[];
  /** A body too large to keep, or beyond the budget: streamed whole from here (`chunks` empty), no retry. */
  rest?: Readable;
  /** Gives the bytes kept back to the retry budget (once no retry can come). */
  release(): void;
}

/** How much of a body may be kept for a retry: at most `cap` bytes, within `budget` for its source. */
export interface RetryKeep {
  cap: number;
  budget: RetryBudget;
}

export type Answer = { headers: IncomingHttpHeaders; stream: ClientHttp2Stream };

export const hostUnavailable = (host: string, why: string) =>
  AppError.of('host_unavailable', `the host that runs this server (${host}) ${why}; try again shortly`, { retryAfter: 2 });

/** The request's body for forwarding: what was read already (`given`), or up to `keep.cap` kept
 *  (within the budget of the client's source) and the rest left to stream; undefined when the
 *  client went away before the end of the part kept. */
export async function readBody(req: Req, keep: RetryKeep, ip: string, given?: Buffer): Promise<Body | undefined> {
  const none = () => {};
  if (given) return { chunks: given.length ? [given] : [], release: none };
  if (!hasBody(req)) return { chunks: [], release: none };
  const hold = keep.budget.hold(ip);
  const b = await buffer(req as Readable, keep.cap, hold);
  if (b.gone) return undefined;
  return { chunks: b.chunks, rest: b.whole ? undefined : (req as Readable), release: hold.release };
}

/** The session to `host`, opened now when there is none; or why there is none. */
export async function peerSession(d: OutboundDeps, host: string, requestId?: string): Promise<ClientHttp2Session | AppError> {
  const peer = d.placements.host(host);
  if (!peer) return hostUnavailable(host, 'is down');
  if (!peer.up) {
    // no lease, no session that answers: maybe only cut off from the registry, which a session tells
    d.peers.probe(host, peer.advertise);
    return hostUnavailable(host, 'is down');
  }
  try {
    return await d.peers.session(host, peer.advertise);
  } catch (e) {
    if (e instanceof PeerError && e.loop) {
      d.log.error('forwarding loop: the channel address of a host leads back here', { peer: host, advertise: peer.advertise });
      return AppError.of('forward_loop', `the channel address of ${host} leads back to ${d.self}${requestId === undefined ? '' : ` (request ${requestId})`}`);
    }
    d.log.warn('channel unreachable', { peer: host, advertise: peer.advertise, detail: (e as Error).message });
    return hostUnavailable(host, 'cannot be reached');
  }
}

/** A forwarded request's stream to `host`: the client's head for the channel, who the client is, one hop, then `extra`. */
export async function openForwarded(
  d: OutboundDeps,
  host: string,
  req: Req | IncomingMessage,
  info: RequestInfo,
  extra: OutgoingHttpHeaders,
  endStream: boolean,
): Promise<ClientHttp2Stream | AppError> {
  const session = await peerSession(d, host, info.requestId);
  if (session instanceof AppError) return session;
  const headers: OutgoingHttpHeaders = {
    ...channelHeaders(req.headers as IncomingHttpHeaders),
    ':method': req.method ?? 'GET',
    ':path': req.url ?? '/',
    ':authority': (req.headers.host ?? (req.headers as IncomingHttpHeaders)[':authority'] ?? info.host) as string,
    ':scheme': 'https',
    [H.site]: info.host,
    [H.ip]: info.ip,
    [H.scheme]: info.scheme,
    [H.rid]: info.requestId,
    [H.hops]: '1',
    ...extra,
  };
  try {
    return session.request(headers, { endStream });
  } catch (e) {
    d.log.warn('channel request refused', { peer: host, detail: (e as Error).message });
    return hostUnavailable(host, 'cannot be reached');
  }
}

/** The request and its body over the channel to `host`; the answer head, or why there is none. */
export async function sendForwarded(
  d: OutboundDeps,
  host: string,
  req: Req,
  info: RequestInfo,
  extra: OutgoingHttpHeaders,
  body: Body,
): Promise<Answer | AppError> {
  const stream = await openForwarded(d, host, req, info, extra, !body.chunks.length && !body.rest);
  if (stream instanceof AppError) return (d.health?.refused(host, stream.code), stream);
  for (const c of body.chunks) stream.write(c);
  if (body.rest) body.rest.pipe(stream);
  else if (body.chunks.length) stream.end();
  return new Promise((resolve) => {
    let settled = false;
    stream.once('response', (headers) => {
      settled = true;
      d.health?.forwarded(host, Number(headers[':status']) === NOT_HERE ? 'not_here' : 'answered');
      stream.on('error', () => {});
      resolve({ headers, stream });
    });
    // the error is made only when there is no answer (an AppError per request would cost)
    const onError = (e?: Error) => void (settled || ((settled = true), d.health?.stream(host, e), resolve(hostUnavailable(host, 'cannot be reached'))));
    stream.once('error', onError);
    stream.once('close', onError);
  });
}

/** The owner's answer, streamed to the client as it comes. */
export function relay(a: Answer, res: Res): void {
  const { headers, stream } = a;
  res.on('close', () => {
    if (!stream.closed) stream.close(CANCEL);
  });
  stream.on('error', () => (res as { destroy?: () => void }).destroy?.());
  stream.on('aborted', () => (res as { destroy?: () => void }).destroy?.());
  res.writeHead(Number(headers[':status']), answerHeaders(headers) as Record<string, string>);
  (stream as Readable).pipe(res as unknown as NodeJS.WritableStream);
}
