// Egress metering at the client's connection: what a server's subdomain and exposed ports send
// out is counted from the bytes the client connection took, never from what an answer announces
// (Content-Length of a HEAD, or of a download the client aborted). Bytes are reported to the
// sink while a connection is open (every `flushMs`) and once more when it closes.
//
// What counts:
// - a raw socket (WebSocket after its upgrade, an exposed TCP port): the bytes the socket has
//   handed to the kernel, `bytesWritten - writableLength` (bytesWritten alone includes what still
//   waits in node's buffer and may never leave);
// - an HTTP/1.1 answer: the same measure on its connection, from the moment the answer owns it
//   until it closes or the next answer of a pipelined connection takes the socket over. The
//   response head is counted: it is part of what was sent (a HEAD bills its head only);
// - an HTTP/2 answer: the DATA bytes of its stream whose write completed (node calls a stream
//   write back once the frames went to the session's socket; writes still queued when the stream
//   is reset never do). HTTP/2 has no per-stream byte count of its own, and the HPACK-compressed
//   HEADERS frame (tens of bytes) is not counted.
// TLS framing is not counted: egress is HTTP's bytes (the plain text), the same over http and https.

import type { Http2ServerResponse, Http2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { Res } from '../http/index.js';

export type EgressSink = (serverId: string, bytes: number) => void;

/** Bytes of a socket that left node for the kernel. */
function taken(s: Duplex): number {
  const written = (s as Duplex & { bytesWritten?: number }).bytesWritten;
  return written === undefined ? 0 : written - s.writableLength;
}

const lengthOf = (chunk: Buffer | string, enc: BufferEncoding) => (typeof chunk === 'string' ? Buffer.byteLength(chunk, enc) : chunk.length);

abstract class Counter {
  private last = 0;
  ended = false;

  constructor(
    protected readonly meter: EgressMeter,
    readonly serverId: string,
  ) {}

  /** Bytes sent since the counter began. */
  protected abstract total(): number;

  /** Reports what was sent since the last report. */
  report(): void {
    const t = this.total();
    if (t > this.last) {
      this.meter.sink(this.serverId, t - this.last);
      this.last = t;
    }
  }

  end(): void {
    if (this.ended) return;
    this.report();
    this.ended = true;
    this.meter.untrack(this);
  }
}

class SocketCounter extends Counter {
  private from = 0;
  private sock: Duplex | undefined;

  /** Counts from now on. */
  begin(sock: Duplex): void {
    this.sock = sock;
    this.from = taken(sock);
  }

  protected total(): number {
    return this.sock ? Math.max(0, taken(this.sock) - this.from) : 0;
  }
}

class StreamCounter extends Counter {
  sent = 0;

  protected total(): number {
    return this.sent;
  }
}

/** The answer of an HTTP/1.1 connection that currently owns it (pipelined answers take turns). */
const OWNER = Symbol('rootbox.egress.owner');
type Owned = Duplex & { [OWNER]?: SocketCounter };

export class EgressMeter {
  private readonly open = new Set<Counter>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly sink: EgressSink,
    private readonly flushMs = 2000,
  ) {}

  /** Meters one HTTP answer (HTTP/1.1 or HTTP/2) from now until it closes. */
  answer(res: Res, serverId: string): void {
    const stream = (res as Http2ServerResponse).stream as Http2Stream | undefined;
    if (stream) return this.http2(res, stream, serverId);
    const c = new SocketCounter(this, serverId);
    const own = (sock: Owned) => {
      if (c.ended) return;
      sock[OWNER]?.end(); // the previous answer of this connection is over: its count stops here
      sock[OWNER] = c;
      c.begin(sock);
    };
    const sock = res.socket as Owned | null;
    if (sock) own(sock);
    else res.once('socket', own); // a pipelined answer gets the socket when the one before it ends
    this.track(c);
    res.once('close', () => {
      c.end();
      const s = res.socket as Owned | null;
      if (s && s[OWNER] === c) s[OWNER] = undefined;
    });
  }

  /**
   * Meters an HTTP/1.1 answer written straight onto its connection (the edge's lane), from now
   * until an answer for another server takes the connection over or it closes (answers for the
   * same server in a row share one count).
   */
  turn(sock: Duplex, serverId: string): void {
    const s = sock as Owned;
    const before = s[OWNER];
    // the connection's previous answer was for the same server: its count goes on
    if (before && !before.ended && before.serverId === serverId) return;
    before?.end();
    const c = new SocketCounter(this, serverId);
    c.begin(sock);
    s[OWNER] = c;
    this.track(c);
    if (!before) sock.once('close', () => s[OWNER]?.end());
  }

  /** Meters a raw client socket (a WebSocket after its upgrade, an exposed port) until it closes. */
  socket(sock: Duplex, serverId: string): void {
    const c = new SocketCounter(this, serverId);
    c.begin(sock);
    this.track(c);
    sock.once('close', () => c.end());
  }

  /** Reports what every open connection sent since its last report. */
  flush(): void {
    for (const c of this.open) c.report();
  }

  untrack(c: Counter): void {
    this.open.delete(c);
  }

  private http2(res: Res, stream: Http2Stream, serverId: string): void {
    const c = new StreamCounter(this, serverId);
    type Write = (chunk: Buffer | string, enc: BufferEncoding, cb: (err?: Error | null) => void) => void;
    type Writev = (chunks: { chunk: Buffer | string; encoding: BufferEncoding }[], cb: (err?: Error | null) => void) => void;
    const s = stream as Http2Stream & { _write: Write; _writev?: Writev };
    const write = s._write;
    const writev = s._writev;
    s._write = function (chunk, enc, cb) {
      write.call(this, chunk, enc, (err) => {
        if (!err) c.sent += lengthOf(chunk, enc);
        cb(err);
      });
    };
    if (writev) {
      s._writev = function (chunks, cb) {
        writev.call(this, chunks, (err) => {
          if (!err) for (const x of chunks) c.sent += lengthOf(x.chunk, x.encoding);
          cb(err);
        });
      };
    }
    this.track(c);
    res.once('close', () => c.end());
  }

  private track(c: Counter): void {
    this.open.add(c);
    if (this.timer) return;
    this.timer = setInterval(() => {
      this.flush();
      if (this.open.size === 0) {
        clearInterval(this.timer);
        this.timer = undefined;
      }
    }, this.flushMs);
    this.timer.unref();
  }
}
