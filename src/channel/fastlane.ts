// The sender's fast path: a lane request (edge/lane.ts: a bodiless GET or HEAD read by the edge's
// own HTTP/1.1 reader) for a server of another host goes over the channel without node's HTTP
// server — its head becomes the stream's headers straight from the raw pairs the lane read, and
// the owner's answer is written back as HTTP/1.1 by hand (its headers as they came, framed by
// length, else chunked), head and a first body part in one write. Only when a session to the
// owner is already open and up; everything else, and every failure before the first byte
// reached the client (no session, refused stream, "not here", a reset), is handed back to the
// edge (replay): node's server answers that request by the full path (front.ts), which opens
// sessions, retries after "not here" and makes the error pages.

import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import type { Duplex } from 'node:stream';
import { connectionNamed, HttpDate, REQUEST_DROP, responseHead } from '../h1/index.js';
import type { LaneExchange, LaneOutcome, LaneRequest, RequestInfo } from '../http/index.js';
import type { PlacementView } from './lookup.js';
import { CANCEL } from './peers.js';
import { H, NOT_HERE, PREFIX } from './wire.js';

const CRLF = '\r\n';
const date = new HttpDate();

/** The lane head as the channel's headers: hop-by-hop, spoofable and our own names dropped, ours added. */
function headersOf(r: LaneRequest, info: RequestInfo, p: PlacementView): OutgoingHttpHeaders {
  const named = connectionNamed(r.raw);
  const out: OutgoingHttpHeaders = {};
  for (let i = 0; i < r.raw.length; i += 2) {
    const name = r.raw[i].toLowerCase();
    if (REQUEST_DROP.has(name) || name.startsWith(PREFIX) || (named && named.includes(name))) continue;
    const had = out[name];
    out[name] =
      had === undefined ? r.raw[i + 1] : name === 'cookie' ? `${had as string}; ${r.raw[i + 1]}` : [...([] as string[]).concat(had as string), r.raw[i + 1]];
  }
  out[':method'] = r.method;
  out[':path'] = r.target;
  out[':authority'] = r.host;
  out[':scheme'] = 'https';
  out[H.site] = info.host;
  out[H.ip] = info.ip;
  out[H.scheme] = info.scheme;
  out[H.rid] = info.requestId;
  out[H.server] = p.serverId;
  out[H.epoch] = String(p.epoch);
  out[H.hops] = '1';
  out[H.lane] = '1';
  if (r.close) out[H.close] = '1';
  if (info.alias !== undefined) out[H.alias] = info.alias;
  return out;
}

/** The owner's answer head as name, value pairs: pseudo-headers and our own names dropped. */
function answerPairs(h: IncomingHttpHeaders): { pairs: string[]; rid: boolean } {
  const pairs: string[] = [];
  let rid = false;
  for (const name in h) {
    if (name.charCodeAt(0) === 58 || name.startsWith(PREFIX)) continue;
    const v = h[name];
    if (v === undefined) continue;
    if (name === 'x-request-id') rid = true;
    if (Array.isArray(v)) for (const x of v) pairs.push(name, x);
    else pairs.push(name, String(v));
  }
  return { pairs, rid };
}

/** Forwards a lane request on an open session; false when it cannot start (the full path answers). */
export function laneForward(
  session: ClientHttp2Session,
  r: LaneRequest,
  sock: Duplex,
  info: RequestInfo,
  p: PlacementView,
  done: (o: LaneOutcome) => void,
  /** The owner said "not here" (told before the replay: the full path then asks the registry first). */
  notHere?: () => void,
): LaneExchange | false {
  let stream: ClientHttp2Stream;
  try {
    stream = session.request(headersOf(r, info, p), { endStream: true });
  } catch {
    return false;
  }
  let over = false;
  let status = 0;
  let head: string | undefined;
  let chunked = false;
  let wrote = false;
  /** The owner sent its app's HTTP/1.1 answer as bytes (ownerlane.ts): they go to the client as they are. */
  let raw = false;
  const finish = (o: LaneOutcome) => {
    if (over) return;
    over = true;
    if (!stream.closed) stream.close(CANCEL);
    done(o);
  };
  stream.on('response', (h) => {
    status = Number(h[':status']);
    if (status === NOT_HERE) {
      notHere?.();
      return finish({ kind: 'replay' });
    }
    if (h[H.raw] === '1') return void (raw = true);
    const { pairs, rid } = answerPairs(h);
    const a = responseHead(status, pairs, {
      requestId: rid ? undefined : info.requestId,
      date,
      bodiless: r.method === 'HEAD' || status === 204 || status === 304,
      close: r.close,
    });
    head = a.text;
    chunked = a.chunked;
  });
  const onDrain = () => stream.resume();
  stream.on('data', (c: Buffer) => {
    if (over || c.length === 0) return;
    if (raw && !wrote) status = Number(c.toString('latin1', 9, 12)); // "HTTP/1.1 200"
    const framed = raw ? c : chunked ? Buffer.concat([Buffer.from(`${c.length.toString(16)}${CRLF}`, 'latin1'), c, Buffer.from(CRLF, 'latin1')]) : c;
    const out = head !== undefined ? Buffer.concat([Buffer.from(head, 'latin1'), framed]) : framed;
    head = undefined;
    wrote = true;
    if (!sock.write(out)) {
      stream.pause();
      sock.once('drain', onDrain);
    }
  });
  const ended = () => {
    if (over) return;
    if (head === undefined && !wrote) return finish({ kind: 'replay' }); // no answer head at all
    if (!raw) sock.write(`${head ?? ''}${chunked ? `0${CRLF}${CRLF}` : ''}`, 'latin1');
    head = undefined;
    over = true;
    sock.off('drain', onDrain);
    done({ kind: 'answered', status, reusable: !r.close });
  };
  stream.on('end', ended);
  const broke = () => {
    if (over) return;
    if (wrote) {
      sock.destroy(); // cut: the client sees a truncated answer
      return finish({ kind: 'cut', status });
    }
    finish({ kind: 'replay' });
  };
  stream.on('error', broke);
  stream.on('aborted', broke);
  // a bodiless answer (HEAD, 204) may close its stream before 'end' is read: a clean close with a head is its end
  stream.on('close', () => (stream.rstCode === 0 && (head !== undefined || wrote) ? ended() : broke()));
  return {
    clientGone: () => {
      sock.off('drain', onDrain);
      finish({ kind: 'cut', status: status || undefined });
    },
  };
}
