// The lane: the edge's own HTTP/1.1 reader in front of node's HTTP server, for the requests that
// make up most of a site's traffic. Every HTTP/1.1 connection (plain, or TLS without h2) starts
// here. A request head is read from the socket's bytes and taken by the lane only when it is a
// bodiless GET or HEAD in origin form for a <slug> host (or a server's own domain) with exactly
// one Host, nothing that frames a body, no Upgrade or Expect, every line well-formed — and the
// proxy can answer it at once (an awake app: LaneApp.lane); the answer is then written straight
// onto the connection (proxy/direct.ts) without node's per-request objects. Anything else — a
// head the lane does not take (h1's request reader decides), an API host, a malformed or
// oversized head — hands the connection, from that request's first byte on, to node's HTTP
// server for good, which answers exactly as it always did. Requests are taken one at a time;
// pipelined bytes wait, and a connection whose unread bytes pass the head limit stops being read.
// As node's server: an idle connection between requests is closed after the keep-alive timeout,
// and every answer, whole or cut, is counted.

import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { MAX_REQUEST_HEAD, readRequest } from '../h1/index.js';
import type { LaneApp, LaneExchange, LaneOutcome, LaneRequest, RequestInfo } from '../http/index.js';
import { ConnGuard, type Conn } from './guard.js';

/** What the edge lends the lane. */
export interface LaneContext {
  guard: ConnGuard;
  app: LaneApp;
  /** The target of a head the lane read: a site's request info, or undefined for everything else. */
  route(r: LaneRequest, rid: string | undefined, ip: string, scheme: 'http' | 'https'): (RequestInfo & { slug: string }) | undefined;
  /** An answer began / ended (the edge's in-flight count, metrics). */
  began(): void;
  /** `status` undefined: not answered here (node's server answers and counts it); `whole`: the answer went out in full. */
  ended(status: number | undefined, startedAt: number, whole: boolean): void;
  stopping(): boolean;
  /** ms an idle connection between requests stays open: node's server's keepAliveTimeout. */
  keepAliveTimeout: number;
}

/** Reads a head may take to arrive before the lane hands it to node's server. */
const MAX_PARTIAL_READS = 4;

/** Reads an HTTP/1.1 connection's requests until one is not the lane's; then `handover` gives it to node's server. */
export class LaneConnection {
  private pending: Buffer | undefined;
  private busy = false;
  private gone = false;
  private ended = false;
  /** Reads so far of a head not yet complete. */
  private partial = 0;
  /** What arrived while an answer was under way, and its size. */
  private queued: Buffer[] | undefined;
  private queuedBytes = 0;
  /** The answer under way, told when the connection closes. */
  private current: LaneExchange | undefined;
  private readonly conn: Conn | undefined;
  /** Closes the connection when it stays idle between requests (made at the first answer, refreshed after each). */
  private idle: NodeJS.Timeout | undefined;

  constructor(
    private readonly sock: Socket | TLSSocket,
    private readonly scheme: 'http' | 'https',
    private readonly ctx: LaneContext,
    private readonly handover: (sock: Socket | TLSSocket) => void,
  ) {
    this.conn = ConnGuard.of(sock);
    sock.on('data', this.onData);
    sock.on('end', this.onEnd);
    sock.on('error', noop);
    sock.on('close', this.onClose);
    // no socket timer (refreshed on every read and write): the guard's head deadline closes a
    // stalled head, the keep-alive timer an idle connection, the upstream's inactivity limit an answer that stalls
  }

  private readonly onClose = (): void => {
    this.stopIdle();
    const c = this.current;
    this.current = undefined;
    c?.clientGone();
  };

  private readonly onData = (d: Buffer): void => {
    this.stopIdle();
    if (this.busy) {
      // pipelined bytes are kept as they came (joined once, when their turn comes); beyond a head's
      // worth they wait in the kernel until the answer is out
      (this.queued ??= []).push(d);
      this.queuedBytes += d.length;
      if (this.queuedBytes > MAX_REQUEST_HEAD) this.sock.pause();
      return;
    }
    this.pending = this.pending ? Buffer.concat([this.pending, d]) : d;
    this.next();
  };

  /** Joins what arrived while an answer was under way to what is pending. */
  private unqueue(): void {
    if (!this.queued) return;
    this.pending = Buffer.concat(this.pending ? [this.pending, ...this.queued] : this.queued);
    this.queued = undefined;
    this.queuedBytes = 0;
  }

  private readonly onEnd = (): void => {
    this.ended = true;
    this.stopIdle();
    if (this.busy) return;
    // a head cut short by the FIN is node's to answer
    if (this.pending) this.giveAway();
    else this.sock.end();
  };

  /** As node's server: the connection is destroyed when no request starts within the keep-alive timeout. */
  private startIdle(): void {
    if (this.idle) this.idle.refresh();
    else this.idle = setTimeout(() => this.sock.destroy(), this.ctx.keepAliveTimeout).unref();
  }

  private stopIdle(): void {
    if (this.idle) clearTimeout(this.idle);
  }

  /** Takes the next complete head, or hands the connection over. */
  private next(): void {
    this.unqueue();
    const buf = this.pending;
    if (!buf || this.gone) return;
    const read = readRequest(buf);
    if (read.kind === 'more') {
      // A head still incomplete after a few reads is node's: its parser reads a trickled head byte
      // by byte at no extra cost, where the lane looks at all of it again each time.
      if (++this.partial > MAX_PARTIAL_READS) this.giveAway();
      return;
    }
    this.partial = 0;
    if (read.kind === 'node') return this.giveAway();
    const r = read.head;
    const info = this.ctx.route(r, r.rid, this.sock.remoteAddress ?? '', this.scheme);
    if (!info) return this.giveAway();
    const head = buf.subarray(0, read.size);
    this.pending = read.size < buf.length ? buf.subarray(read.size) : undefined;
    this.busy = true;
    if (this.conn) this.ctx.guard.requestStarted(this.conn);
    this.ctx.began();
    const t0 = performance.now();
    let taken: LaneExchange | false;
    try {
      taken = this.ctx.app.lane(r, this.sock, info, (o) => this.done(o, head, info, t0));
    } catch {
      // nothing was sent: node's server answers the request (the full path has its own guards)
      taken = false;
    }
    if (taken) this.current = taken;
    else if (this.busy) {
      this.busy = false;
      this.unstart();
      this.pending = this.pending ? Buffer.concat([head, this.pending]) : head;
      this.giveAway();
    }
  }

  private unstart(): void {
    if (this.conn) this.ctx.guard.requestEnded(this.conn);
    this.ctx.ended(undefined, 0, false);
  }

  private done(o: LaneOutcome, head: Buffer, info: RequestInfo, t0: number): void {
    if (!this.busy) return; // told twice
    this.busy = false;
    this.current = undefined;
    if (o.kind === 'replay') {
      this.unstart();
      if (this.conn) this.conn.replay = { requestId: info.requestId, failure: o.failure };
      this.pending = this.pending ? Buffer.concat([head, this.pending]) : head;
      return this.giveAway();
    }
    if (this.conn) this.ctx.guard.requestEnded(this.conn);
    // a cut answer is counted as node's server counts it: with the status it began with
    this.ctx.ended(o.kind === 'answered' ? o.status : (o.status ?? 200), t0, o.kind === 'answered');
    if (o.kind === 'cut') return void this.sock.destroy();
    if (!o.reusable || this.ctx.stopping()) {
      this.gone = true;
      return void this.sock.end();
    }
    if (this.sock.isPaused()) this.sock.resume();
    if (this.pending || this.queued) this.next();
    else if (this.ended) this.sock.end();
    else this.startIdle();
  }

  /** node's server takes the connection from the first byte not answered here. */
  private giveAway(): void {
    if (this.gone) return;
    this.gone = true;
    this.stopIdle();
    const s = this.sock;
    s.off('data', this.onData);
    s.off('end', this.onEnd);
    s.off('close', this.onClose);
    s.off('error', noop);
    this.unqueue();
    const pending = this.pending;
    this.pending = undefined;
    this.handover(s);
    // node's server reads on from the socket; the bytes and the FIN the lane already read are
    // handed to its listeners first (unshift would not do: it throws once the stream ended)
    if (pending) s.emit('data', pending);
    if (this.ended) s.emit('end');
    if (s.isPaused()) s.resume();
  }
}

function noop(): void {}
