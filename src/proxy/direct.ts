// One lane request (edge/lane.ts: a bodiless GET or HEAD read by the edge's own HTTP/1.1 reader)
// forwarded to an awake app and answered straight onto the client's connection, without node's
// HTTP server objects: the head goes up over a pooled connection (pool.ts, h1/ as for every
// forward), the answer comes back through h1's reader and is written as HTTP/1.1 by hand —
// the app's cleaned headers, ours (x-request-id, date), and the body as the app framed it by
// length, else re-framed as chunked. An answer that arrives whole in one read goes out with the
// other writes of that batch of events (batch.ts); a longer one streams with back-pressure both
// ways. A stale kept-alive connection is retried once on a new one. Other failures before the
// first byte reached the client are handed back to the edge (replay) with their error: node's
// server then answers that request with the page the full path gives, without forwarding it again.

import type { Duplex } from 'node:stream';
import type { AppError } from '../errors.js';
import type { LaneOutcome, LaneRequest, RequestInfo } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { ResponseReader, requestHead, responseHead, wholeAnswer, type HttpDate, type ReaderEvents, type ResponseHead } from '../h1/index.js';
import { sourceKey } from '../slots.js';
import type { Batch } from './batch.js';
import type { Bumped, Conn, Refusal, Upstream, UpstreamPool } from './pool.js';
import { UpstreamTurn } from './turn.js';
import { appWentAway, codeOf, refusal, reportFailure, type ForwardFailure } from './failures.js';

export interface DirectOptions {
  serverId: string;
  /** Called once the exchange is over (presence hold). */
  release: () => void;
  /** The answer owns the connection from its head on (egress metering). */
  meter?: { turn(sock: Duplex, serverId: string): void };
  onFailure?: (serverId: string, f: ForwardFailure) => void;
  /**
   * The app went away before answering (failures.ts appWentAway): called, and the request is
   * handed back to the edge (replay) without a failure, so the full path waits for the app and
   * forwards it again.
   */
  appAway?: () => void;
  done: (o: LaneOutcome) => void;
  log: Logger;
}

/** What the forwarder lends each of its lane exchanges: its write batch and its Date value. */
export interface DirectShared {
  batch: Batch;
  date: HttpDate;
}

const CRLF = '\r\n';

export class DirectExchange extends UpstreamTurn implements ReaderEvents, Bumped {
  /** The head to send, until it is sent with the first body bytes or the end. */
  private headText: string | undefined;
  private status = 0;
  /** Re-frame the body as chunked (the app sent no length). */
  private chunked = false;
  private wrote = false;
  /** Inside onData: body bytes are staged, so an answer that ends in the same read goes out in one write. */
  private reading = false;
  private staged: Buffer[] | undefined;
  private cancelWait: () => void = () => {};
  private readonly wire: string;

  constructor(
    protected readonly pool: UpstreamPool,
    private readonly r: LaneRequest,
    private readonly sock: Duplex,
    private readonly upstream: Upstream,
    private readonly info: RequestInfo,
    private readonly o: DirectOptions,
    private readonly shared: DirectShared,
  ) {
    super();
    this.wire = requestHead(r.method, r.target, r.host, r.raw, info.ip, info.scheme, false);
    this.reader = new ResponseReader(this, r.method === 'HEAD');
  }

  start(): this {
    if (this.retried) this.reader = new ResponseReader(this, this.r.method === 'HEAD');
    this.answered = false;
    const cancel = this.pool.acquire(this.upstream, this.retried, sourceKey(this.info.ip), (c) => this.attach(c), this);
    if (typeof cancel === 'string') this.refused(cancel);
    else this.cancelWait = cancel;
    return this;
  }

  /** Queued, this request lost its place to another source's (pool.ts). */
  bumped(): void {
    this.cancelWait = () => {};
    if (!this.settled) this.refused('full');
  }

  /** The pool queued nothing for this request: node's server answers it 429 or 503 (failures.ts refusal). */
  private refused(why: Refusal): void {
    this.settle(false);
    const failure = refusal(why);
    queueMicrotask(() => this.o.done({ kind: 'replay', failure })); // told after its caller is done with it, as always
  }

  private attach(c: Conn): void {
    this.cancelWait = () => {};
    if (this.settled) return this.pool.release(c, true);
    this.conn = c;
    c.owner = this;
    this.shared.batch.holdWrites(c.sock);
    c.sock.write(this.wire, 'latin1');
  }

  onData(chunk: Buffer): void {
    this.answered = true;
    this.reading = true;
    try {
      this.reader.feed(chunk);
      this.reading = false;
      // the answer did not end in this read: what came of it goes out now, the rest streams
      if (this.staged) this.unstage();
    } catch (e) {
      this.reading = false;
      this.staged = undefined;
      this.fail(e as Error);
    }
  }

  head(h: ResponseHead): void {
    if (this.settled) return;
    this.status = h.status;
    const head = responseHead(h.status, h.headers, {
      requestId: h.requestId ? undefined : this.info.requestId,
      date: this.shared.date,
      bodiless: this.r.method === 'HEAD' || h.status === 204 || h.status === 304,
      close: this.r.close,
    });
    this.chunked = head.chunked;
    this.headText = head.text;
  }

  /** The whole answer came in one read: head, body and framing go out as one buffer in one write. */
  private whole(): void {
    const out = wholeAnswer(this.headText!, this.chunked, this.staged ?? []);
    this.staged = undefined;
    this.o.meter?.turn(this.sock, this.o.serverId);
    this.headText = undefined;
    this.wrote = true;
    this.sock.write(out);
  }

  /** Sends the head once, with the answer now owning the connection (egress). */
  private flushHead(): void {
    if (this.headText === undefined) return;
    this.o.meter?.turn(this.sock, this.o.serverId);
    this.shared.batch.holdWrites(this.sock as never);
    this.sock.write(this.headText, 'latin1');
    this.headText = undefined;
    this.wrote = true;
  }

  data(chunk: Buffer): void {
    if (this.settled || chunk.length === 0) return;
    // inside the read that may also end the answer: kept (a view, valid during this read) to go out in one write
    if (this.reading && !this.wrote) return void (this.staged ??= []).push(chunk);
    this.stream(chunk);
  }

  /** Writes body bytes as they come, with back-pressure on the app's connection. */
  private stream(chunk: Buffer): void {
    this.flushHead();
    const copy = Buffer.from(chunk); // a view of the pool's shared read buffer: the socket may queue it
    let ok: boolean;
    if (this.chunked) {
      this.sock.write(`${copy.length.toString(16)}${CRLF}`, 'latin1');
      this.sock.write(copy);
      ok = this.sock.write(CRLF, 'latin1');
    } else ok = this.sock.write(copy);
    if (!ok) this.holdApp();
  }

  /** Copies what was staged in this read out before the read buffer is used again. */
  private unstage(): void {
    const parts = this.staged!;
    this.staged = undefined;
    for (const p of parts) this.stream(p);
  }

  end(reusable: boolean): void {
    if (this.settled) return;
    if (this.wrote) {
      if (this.chunked) this.sock.write(`0${CRLF}${CRLF}`, 'latin1');
    } else this.whole();
    this.settle(reusable);
    this.o.done({ kind: 'answered', status: this.status, reusable: !this.r.close });
  }

  protected resendable(): boolean {
    return true; // a lane request is a bodiless GET or HEAD
  }

  /** The client's connection closed (the lane tells). */
  clientGone(): void {
    if (this.settled) return;
    this.settle(false);
    this.o.done({ kind: 'cut', status: this.status || undefined });
  }

  /** The server could not be made to answer (its thaw failed): ended with `failure` unless over. */
  abandon(failure: AppError): void {
    if (this.settled) return;
    this.settle(false);
    if (this.wrote) {
      this.sock.destroy();
      return this.o.done({ kind: 'cut', status: this.status });
    }
    this.o.done({ kind: 'replay', failure });
  }

  protected fail(err: Error): void {
    if (this.settled) return;
    this.settle(false);
    if (this.wrote) {
      this.sock.destroy(); // cut: the client sees a truncated answer
      return this.o.done({ kind: 'cut', status: this.status });
    }
    if (this.o.appAway && appWentAway(err, this.answered)) {
      this.o.log.debug('app went away: the full path waits for it', { rid: this.info.requestId, error_code: codeOf(err) });
      this.o.appAway();
      return this.o.done({ kind: 'replay' });
    }
    // nothing reached the client: node's server answers the request with the page, as the full path would
    const failure = reportFailure(err, this.timedOut, {
      serverId: this.o.serverId,
      requestId: this.info.requestId,
      log: this.o.log,
      onFailure: this.o.onFailure,
    });
    this.o.done({ kind: 'replay', failure });
  }

  private settle(reusable: boolean): void {
    this.settled = true;
    this.cancelWait();
    this.release(reusable);
    this.o.release();
  }

  protected client(): NodeJS.EventEmitter {
    return this.sock;
  }
}
