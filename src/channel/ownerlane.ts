// The owner's fast path: a forwarded request the sender took from its own lane (a bodiless GET or
// HEAD, marked `x-rootbox-lane`, sent with END_STREAM) is given to this host's proxy lane as if
// its client had come here (proxy/direct.ts: the app's answer written as HTTP/1.1 by hand), on a
// socket that is the HTTP/2 stream. The stream's answer is 200 with `x-rootbox-raw` and carries
// those HTTP/1.1 bytes untouched; the sender copies them onto its client's connection. When the
// proxy's lane does not take the request (static files, a server not awake), or hands it back
// before a byte was written (replay: the page of a failure, or a wait for the app), the stream goes
// to node's HTTP/2 compatibility layer (the full path, server.ts), the failure with it.

import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { Duplex } from 'node:stream';
import type { AppError } from '../errors.js';
import type { LaneApp, LaneExchange, LaneOutcome, LaneRequest, RequestInfo } from '../http/index.js';
import { CANCEL } from './peers.js';
import { H, PREFIX } from './wire.js';

/** The stream as the socket the proxy's lane writes its HTTP/1.1 answer to. */
class LaneSocket extends Duplex {
  private sent = 0;
  private responded = false;

  constructor(
    private readonly stream: ServerHttp2Stream,
    readonly remoteAddress: string,
  ) {
    super({ allowHalfOpen: false });
  }

  /** What left through the stream, plus what waits (egress subtracts writableLength). */
  get bytesWritten(): number {
    return this.sent + this.writableLength;
  }

  /** Whether any answer byte went out (after that, no replay). */
  get started(): boolean {
    return this.responded;
  }

  override _read(): void {}

  private respond(): boolean {
    if (this.stream.destroyed || this.stream.closed) return false;
    if (!this.responded) {
      this.responded = true;
      this.stream.respond({ ':status': 200, [H.raw]: '1' });
    }
    return true;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    if (!this.respond()) return cb(new Error('the channel stream closed'));
    this.stream.write(chunk, (err) => {
      if (!err) this.sent += chunk.length;
      cb(err);
    });
  }

  override _writev(chunks: { chunk: Buffer }[], cb: (e?: Error | null) => void): void {
    const all = chunks.length === 1 ? chunks[0].chunk : Buffer.concat(chunks.map((c) => c.chunk));
    this._write(all, 'latin1', cb);
  }

  override _final(cb: (e?: Error | null) => void): void {
    if (this.respond()) this.stream.end();
    cb();
  }

  override _destroy(err: Error | null, cb: (e: Error | null) => void): void {
    if (!this.stream.destroyed && !this.stream.closed) this.stream.close(CANCEL);
    cb(err);
  }
}

/** The lane head of a forwarded request: the client's headers (pseudo and our own names dropped). */
function laneRequest(h: IncomingHttpHeaders): LaneRequest | undefined {
  const method = h[':method'];
  if (method !== 'GET' && method !== 'HEAD') return undefined;
  const raw: string[] = [];
  for (const name in h) {
    if (name.charCodeAt(0) === 58 || name.startsWith(PREFIX)) continue;
    const v = h[name];
    if (Array.isArray(v)) for (const x of v) raw.push(name, x);
    else if (v !== undefined) raw.push(name, v);
  }
  return { method, target: String(h[':path'] ?? '/'), host: String(h[':authority'] ?? ''), raw, close: h[H.close] === '1' };
}

/**
 * Answers a lane-marked stream through the proxy's lane; false when the lane does not take it.
 * `replay(failure)` gives the stream to the full path (nothing was written on it).
 */
export function ownerLane(
  lane: LaneApp['lane'],
  stream: ServerHttp2Stream,
  h: IncomingHttpHeaders,
  info: RequestInfo & { slug: string },
  replay: (failure?: AppError) => void,
): boolean {
  const r = laneRequest(h);
  if (!r) return false;
  const sock = new LaneSocket(stream, info.ip);
  sock.on('error', () => {});
  let ex: LaneExchange | false = false;
  let over = false;
  const done = (o: LaneOutcome) => {
    if (over) return;
    over = true;
    if (o.kind === 'answered') return void sock.end();
    if (o.kind === 'cut') return void sock.destroy();
    if (sock.started) return void sock.destroy(); // cannot happen (a lane replays only before writing)
    replay(o.failure);
  };
  try {
    ex = lane(r, sock, info, done);
  } catch {
    ex = false;
  }
  if (!ex) return over; // declined (false, nothing done), or already handed back
  const taken = ex;
  stream.once('close', () => {
    if (!over) taken.clientGone();
  });
  return true;
}
