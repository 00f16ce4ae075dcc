// The sender's side of one raw lane connection (sender-rawpool.ts opens it): its streams (RawStream), each
// lent to one exchange (sender-rawlane.ts) — the request head sent, the answer's DATA handed over as it
// comes, credits sent back as the client takes it, a CANCEL when the exchange leaves early — and
// the frames read off the connection (wire-mux.ts). A stream is over here at its END, or at once
// when its exchange cancels it (what still comes for it is dropped). A frame for a stream this
// side never opened, a DATA beyond twice the window, or a kind the wire has not drops the
// connection; every stream on a connection that goes is told so.

import type { TLSSocket } from 'node:tls';
import { AppError, isErrorCode } from '../errors.js';
import type { LaneOutcome } from '../http/index.js';
import { ANSWERED, CANCEL, CREDIT, CUT, DATA, END, FrameError, FrameReader, HEAD, LAST_ID, MAX_STREAMS, Outbox, REPLAY, STREAM_WINDOW } from './wire-mux.js';

/** How a stream ended, as the owner said (`cut` too when the connection went first): the lane's
 *  own outcome (http's LaneOutcome) without the answer's status, which the lane reads itself. */
export type StreamEnd = { kind: 'answered' } | { kind: 'cut' } | Extract<LaneOutcome, { kind: 'replay' }>;

/** The exchange a stream carries. */
export interface RawUser {
  /** Bytes of the answer: a view of the shared read buffer, valid only during the call. */
  onData(chunk: Buffer): void;
  /** The stream is over (told once). */
  onEnd(how: StreamEnd): void;
}

/** One request's stream on the peer's connection. */
export class RawStream {
  /** Answer bytes received and not yet credited back: the owner keeps it within its window. */
  private inFlight = 0;
  /** Of those, bytes handed to the client, credited in one frame once there are enough. */
  private uncredited = 0;
  open = true;

  constructor(
    private readonly conn: MuxConn,
    readonly id: number,
    public user: RawUser | undefined,
  ) {}

  /** Sends the request head. */
  head(text: string): void {
    this.conn.out.frame(HEAD, this.id, text);
  }

  /** `n` bytes of the answer were handed to the client: the owner may send as many more. */
  consumed(n: number): void {
    this.uncredited += n;
    if (!this.open || this.uncredited < STREAM_WINDOW / 4) return;
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32BE(this.uncredited);
    this.inFlight -= this.uncredited;
    this.uncredited = 0;
    this.conn.out.frame(CREDIT, this.id, b);
  }

  /** The exchange leaves before the owner ended the stream: the owner is told to stop, the stream is
   *  over here at once (what still comes for it is dropped). */
  cancel(): void {
    this.user = undefined;
    if (!this.open) return;
    this.conn.out.frame(CANCEL, this.id);
    this.conn.drop(this);
  }

  /** Counts `n` bytes received: false when the owner sent far beyond its window. */
  received(n: number): boolean {
    this.inFlight += n;
    return this.inFlight <= 2 * STREAM_WINDOW;
  }
}

export class MuxConn {
  readonly streams = new Map<number, RawStream>();
  readonly out: Outbox;
  ready = false;
  /** The id the next stream gets (they only grow: a sweep that sees it moved saw the connection used). */
  nextId = 1;
  private readonly reader: FrameReader;
  /** Closed once its last stream is over (the pool closed beside a session that ended cleanly). */
  private closing = false;

  constructor(
    readonly sock: TLSSocket,
    private readonly onGone: (c: MuxConn) => void,
  ) {
    this.out = new Outbox(sock);
    this.reader = new FrameReader((type, id, payload) => this.frame(type, id, payload));
    sock.on('error', noop);
    sock.on('close', () => this.gone());
  }

  /** A new stream, or undefined when this connection cannot take one. */
  stream(user: RawUser): RawStream | undefined {
    if (!this.usable() || this.streams.size >= MAX_STREAMS) return undefined;
    const s = new RawStream(this, this.nextId, user);
    this.nextId += 2;
    this.streams.set(s.id, s);
    return s;
  }

  usable(): boolean {
    return this.ready && !this.sock.destroyed && this.sock.writable && this.nextId < LAST_ID;
  }

  read(chunk: Buffer): void {
    try {
      this.reader.feed(chunk);
    } catch {
      this.sock.destroy(); // a peer that does not keep to the wire is not trusted again
    }
  }

  private frame(type: number, id: number, payload: Buffer): void {
    if (this.sock.destroyed) return; // the rest of a read after the connection was dropped
    const s = this.streams.get(id);
    // a stream this side cancelled: what was under way for it is dropped; one never opened is no owner of ours
    if (!s) return void (id >= this.nextId || id % 2 === 0 ? this.sock.destroy() : undefined);
    if (type === DATA) {
      if (!s.received(payload.length)) return void this.sock.destroy(); // far beyond its credit
      return s.user?.onData(payload);
    }
    if (type !== END) return void this.sock.destroy();
    const how = ended(payload); // throws on a kind the wire has not: the stream is then told with the others that the connection went
    this.drop(s);
    const u = s.user;
    s.user = undefined;
    u?.onEnd(how);
  }

  /** The stream is over here. */
  drop(s: RawStream): void {
    this.streams.delete(s.id);
    s.open = false;
    if (this.closing && this.streams.size === 0) this.sock.destroy();
  }

  /** Closes now when no stream is under way, else once the last one is over. */
  closeWhenIdle(): void {
    this.closing = true;
    if (this.streams.size === 0) this.sock.destroy();
  }

  private gone(): void {
    this.onGone(this);
    const all = [...this.streams.values()];
    this.streams.clear();
    for (const s of all) {
      s.open = false;
      const u = s.user;
      s.user = undefined;
      u?.onEnd({ kind: 'cut' });
    }
  }
}

/** An END frame's payload. */
function ended(p: Buffer): StreamEnd {
  if (p[0] === ANSWERED) return { kind: 'answered' };
  if (p[0] === REPLAY) {
    if (p.length === 1) return { kind: 'replay' };
    try {
      const f = JSON.parse(p.subarray(1).toString('utf8')) as {
        code?: unknown;
        kind?: never;
        detail?: unknown;
        retryAfter?: number;
        extra?: Record<string, unknown>;
      };
      if (!isErrorCode(f.code)) return { kind: 'replay' }; // a code of another version: the full path tries it anew
      return { kind: 'replay', failure: AppError.of(f.code, String(f.detail), { kind: f.kind, retryAfter: f.retryAfter, extra: f.extra }) };
    } catch {
      return { kind: 'replay' };
    }
  }
  if (p[0] !== CUT) throw new FrameError(`an END of kind ${p[0]}`);
  return { kind: 'cut' };
}

function noop(): void {}
