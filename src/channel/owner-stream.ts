// The socket a forwarded request's answer is written to on the owner (owner-raw.ts gives one to the
// proxy's lane per stream): what the lane writes goes back as DATA frames of its stream, at most
// STREAM_WINDOW bytes ahead of the sender's credit and none while the connection itself is over
// its mark (write answers false; 'drain' follows); egress is metered from `bytesWritten` less what
// still waits in the outbox, and 'close' is told once those bytes left. The lane's end of the
// request ends the stream (ANSWERED, CUT, or REPLAY with its failure); the sender's CANCEL, or the
// connection going, is the client leaving.

import { EventEmitter } from 'node:events';
import type { AppError } from '../errors.js';
import type { LaneExchange, LaneOutcome } from '../http/index.js';
import { ANSWERED, CUT, DATA, MAX_DATA, type Outbox, REPLAY, STREAM_WINDOW } from './wire-mux.js';

/** What a stream needs of its connection. */
export interface StreamConn {
  readonly out: Outbox;
  /** Streams waiting for the connection's own drain. */
  readonly blocked: Set<OwnerStream>;
  /** Streams with answer bytes in the outbox. */
  readonly unflushed: Set<OwnerStream>;
  /** The connection's buffer is over its mark. */
  crowded(): boolean;
  end(id: number, kind: number, failure?: AppError): void;
  forget(s: OwnerStream): void;
}

/** The socket a forwarded request's answer is written to: its bytes go back on the stream. */
export class OwnerStream extends EventEmitter {
  exchange: LaneExchange | undefined;
  over = false;
  destroyed = false;
  /** Answer bytes handed on (egress is metered from them, once they left the outbox). */
  bytesWritten = 0;
  /** Of those, bytes still in the connection's outbox. */
  private queued = 0;
  private closeTold = false;
  readonly writableCorked = 0;
  /** Bytes sent beyond the sender's credit. */
  private ahead = 0;
  private waiting = false;

  constructor(
    private readonly conn: StreamConn,
    readonly id: number,
  ) {
    super();
  }

  get writableLength(): number {
    return this.queued;
  }

  get writable(): boolean {
    return !this.destroyed;
  }

  write(chunk: Buffer | string, enc?: BufferEncoding): boolean {
    if (this.destroyed) return false;
    let b = typeof chunk === 'string' ? Buffer.from(chunk, enc ?? 'utf8') : chunk;
    while (b.length > MAX_DATA) {
      this.put(b.subarray(0, MAX_DATA));
      b = b.subarray(MAX_DATA);
    }
    if (b.length > 0) this.put(b);
    if (this.ahead < STREAM_WINDOW && !this.conn.crowded()) return true;
    this.waiting = true;
    if (this.conn.crowded()) this.conn.blocked.add(this);
    return false;
  }

  private put(b: Buffer): void {
    this.conn.out.frame(DATA, this.id, b);
    this.bytesWritten += b.length;
    this.queued += b.length;
    this.ahead += b.length;
    this.conn.unflushed.add(this);
  }

  /** The outbox was written (`sent`), or dropped with its connection: those bytes never left. */
  flushed(sent: boolean): void {
    if (!sent) this.bytesWritten -= this.queued;
    this.queued = 0;
    if (this.destroyed) this.tellClose();
  }

  /** 'close' once the last bytes left the outbox (the egress meter reads its count then). */
  private tellClose(): void {
    if (this.closeTold || this.queued > 0) return;
    this.closeTold = true;
    queueMicrotask(() => this.emit('close'));
  }

  credit(n: number): void {
    this.ahead = Math.max(0, this.ahead - n);
    this.maybeDrain();
  }

  maybeDrain(): void {
    if (!this.waiting || this.destroyed || this.ahead >= STREAM_WINDOW || this.conn.crowded()) return;
    this.waiting = false;
    this.conn.blocked.delete(this);
    this.emit('drain');
  }

  cork(): void {}
  uncork(): void {}

  /** The lane cut its answer: the sender cuts its client. */
  destroy(): this {
    if (this.destroyed) return this;
    if (!this.over) {
      this.over = true;
      this.conn.end(this.id, CUT);
      this.conn.forget(this);
    }
    this.closed();
    return this;
  }

  /** The lane is over with this request. */
  done(o: LaneOutcome): void {
    if (this.over) return;
    this.over = true;
    if (o.kind === 'answered') this.conn.end(this.id, ANSWERED);
    else if (o.kind === 'replay') this.conn.end(this.id, REPLAY, o.failure);
    else this.conn.end(this.id, CUT);
    this.conn.forget(this);
    this.closed();
  }

  /** The sender's client left, or the connection went. */
  cancel(): void {
    if (this.destroyed) return;
    const ex = this.exchange;
    this.over = true;
    this.conn.forget(this);
    this.closed();
    ex?.clientGone();
  }

  private closed(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.exchange = undefined;
    this.tellClose();
  }
}

/** An END frame's payload: its kind, then a replay's failure. */
export function endPayload(kind: number, failure?: AppError): Buffer {
  const tail = failure && Buffer.from(failureText(failure));
  const p = Buffer.allocUnsafe(1 + (tail?.length ?? 0));
  p[0] = kind;
  tail?.copy(p, 1);
  return p;
}

/** A replay's failure for the sender's full path (within an END's bound: the extra fields go first, then the detail is cut). */
function failureText(f: AppError): string {
  const whole = { code: f.code, kind: f.kind, detail: f.detail, retryAfter: f.retryAfter, extra: f.extra };
  const text = JSON.stringify(whole);
  return Buffer.byteLength(text) <= 7000 ? text : JSON.stringify({ ...whole, extra: undefined, detail: f.detail.slice(0, 1000) });
}
