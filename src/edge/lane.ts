// The lane: the edge's own HTTP/1.1 reader in front of node's HTTP server, for the requests that
// make up most of a site's traffic. Every HTTP/1.1 connection (plain, or TLS without h2) starts
// here. A request head is read from the socket's bytes and taken by the lane only when it is a
// bodiless GET or HEAD in origin form for a <slug> host (or a server's own domain) with exactly
// one Host, nothing that frames a body, no Upgrade or Expect, every line well-formed — and the
// proxy can answer it at once (an awake app: LaneApp.lane); the answer is then written straight
// onto the connection (proxy/direct.ts) without node's per-request objects. Anything else — a
// head the lane does not take, an API host, a server that must wake, a malformed or oversized
// head — hands the connection, from that request's first byte on, to node's HTTP server for
// good, which answers exactly as it always did. Requests are taken one at a time; pipelined
// bytes wait, and a connection whose unread bytes pass the head limit stops being read.

import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
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
  ended(status: number | undefined, startedAt: number): void;
  stopping(): boolean;
}

/** node's own limit on a request head (http.maxHeaderSize): a longer one is node's to refuse. */
const MAX_HEAD = 16 * 1024;
const MAX_FIELDS = 100;
/** Reads a head may take to arrive before the lane hands it to node's server. */
const MAX_PARTIAL_READS = 4;
const END_OF_HEAD = Buffer.from('\r\n\r\n', 'latin1');
const REQUEST_LINE = /^(GET|HEAD) (\/[\x21-\x7e]*) HTTP\/1\.1$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Controls other than HTAB (obs-text 0x80-0xFF is allowed, as node allows it). */
const CTL = /[\x00-\x08\x0a-\x1f\x7f]/;

const GET = Buffer.from('GET /', 'latin1');
const HEAD = Buffer.from('HEAD /', 'latin1');
/** Control bytes other than HTAB, CR and LF: no request head holds them. */
const NOT_IN_HEAD = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/;

/** Whether the start of a head may still become one the lane takes. */
function mayBeLaneHead(buf: Buffer): boolean {
  const n = Math.min(buf.length, buf[0] === 0x48 ? HEAD.length : GET.length);
  const prefix = buf[0] === 0x48 ? HEAD : GET;
  if (buf.compare(prefix, 0, n, 0, n) !== 0) return false;
  return !NOT_IN_HEAD.test(buf.toString('latin1'));
}

/** A lane request plus the client's X-Request-Id; undefined when the lane does not take the head. */
export function readHead(text: string): (LaneRequest & { rid?: string }) | undefined {
  let eol = text.indexOf('\r\n');
  if (eol < 0) eol = text.length;
  const m = REQUEST_LINE.exec(text.slice(0, eol));
  if (!m) return undefined;
  const raw: string[] = [];
  let host: string | undefined;
  let rid: string | undefined;
  let close = false;
  while (eol < text.length) {
    const start = eol + 2;
    eol = text.indexOf('\r\n', start);
    if (eol < 0) eol = text.length;
    const colon = text.indexOf(':', start);
    if (colon <= start || colon > eol || raw.length >= MAX_FIELDS * 2) return undefined;
    const name = text.slice(start, colon);
    if (!TOKEN.test(name)) return undefined;
    let from = colon + 1;
    let to = eol;
    while (from < to && (text.charCodeAt(from) === 32 || text.charCodeAt(from) === 9)) from++;
    while (to > from && (text.charCodeAt(to - 1) === 32 || text.charCodeAt(to - 1) === 9)) to--;
    const value = text.slice(from, to);
    if (CTL.test(value)) return undefined;
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === 'host') {
          if (host !== undefined) return undefined;
          host = value;
        }
        break;
      case 6:
        if (name.toLowerCase() === 'expect') return undefined;
        break;
      case 7:
        if (name.toLowerCase() === 'upgrade') return undefined;
        break;
      case 10:
        if (name.toLowerCase() === 'connection') {
          const tokens = value.toLowerCase().split(',');
          for (const t of tokens) {
            const tok = t.trim();
            if (tok === 'close') close = true;
            else if (tok === 'upgrade') return undefined;
          }
        }
        break;
      case 12:
        if (rid === undefined && name.toLowerCase() === 'x-request-id') rid = value;
        break;
      case 14:
        // a GET may say its body is empty; any other length, or a second one, is node's to judge
        if (name.toLowerCase() === 'content-length' && (value !== '0' || raw.some((n, i) => i % 2 === 0 && n.toLowerCase() === 'content-length')))
          return undefined;
        break;
      case 17:
        if (name.toLowerCase() === 'transfer-encoding') return undefined;
        break;
    }
    raw.push(name, value);
  }
  if (host === undefined) return undefined;
  return { method: m[1] as 'GET' | 'HEAD', target: m[2], host, raw, close, rid };
}

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
    // no socket timer (refreshed on every read and write): the guard's head deadline closes an
    // idle or stalled connection, and the upstream's inactivity limit ends an answer that stalls
  }

  private readonly onClose = (): void => {
    const c = this.current;
    this.current = undefined;
    c?.clientGone();
  };

  private readonly onData = (d: Buffer): void => {
    if (this.busy) {
      // pipelined bytes are kept as they came (joined once, when their turn comes); beyond a head's
      // worth they wait in the kernel until the answer is out
      (this.queued ??= []).push(d);
      this.queuedBytes += d.length;
      if (this.queuedBytes > MAX_HEAD) this.sock.pause();
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
    if (this.busy) return;
    // a head cut short by the FIN is node's to answer
    if (this.pending) this.giveAway();
    else this.sock.end();
  };

  /** Takes the next complete head, or hands the connection over. */
  private next(): void {
    this.unqueue();
    const buf = this.pending;
    if (!buf || this.gone) return;
    const end = buf.indexOf(END_OF_HEAD);
    if (end < 0) {
      // What can only be refused is node's to refuse at once (a TLS hello on the plain port, bytes no
      // head holds). A head still incomplete after a few reads is node's too: its parser reads a
      // trickled head byte by byte at no extra cost, where the lane looks at all of it again each time.
      if (buf.length > MAX_HEAD || ++this.partial > MAX_PARTIAL_READS || !mayBeLaneHead(buf)) this.giveAway();
      return;
    }
    this.partial = 0;
    if (end > MAX_HEAD) return this.giveAway();
    const r = readHead(buf.toString('latin1', 0, end));
    const info = r && this.ctx.route(r, r.rid, this.sock.remoteAddress ?? '', this.scheme);
    if (!r || !info) return this.giveAway();
    const head = buf.subarray(0, end + 4);
    this.pending = end + 4 < buf.length ? buf.subarray(end + 4) : undefined;
    this.busy = true;
    if (this.conn) this.ctx.guard.requestStarted(this.conn);
    this.ctx.began();
    const t0 = performance.now();
    const taken = this.ctx.app.lane(r, this.sock, info, (o) => this.done(o, head, info, t0));
    if (taken) this.current = taken;
    else {
      this.busy = false;
      this.unstart();
      this.pending = this.pending ? Buffer.concat([head, this.pending]) : head;
      this.giveAway();
    }
  }

  private unstart(): void {
    if (this.conn) this.ctx.guard.requestEnded(this.conn);
    this.ctx.ended(undefined, 0);
  }

  private done(o: LaneOutcome, head: Buffer, info: RequestInfo, t0: number): void {
    this.busy = false;
    this.current = undefined;
    if (o.kind === 'replay') {
      this.unstart();
      if (this.conn) this.conn.replay = { requestId: info.requestId, failure: o.failure };
      this.pending = this.pending ? Buffer.concat([head, this.pending]) : head;
      return this.giveAway();
    }
    if (this.conn) this.ctx.guard.requestEnded(this.conn);
    this.ctx.ended(o.kind === 'answered' ? o.status : undefined, t0);
    if (o.kind === 'cut') return void this.sock.destroy();
    if (!o.reusable || this.ctx.stopping()) {
      this.gone = true;
      return void this.sock.end();
    }
    if (this.sock.isPaused()) this.sock.resume();
    if (this.pending || this.queued) this.next();
    else if (this.ended) this.sock.end();
  }

  /** node's server takes the connection from the first byte not answered here. */
  private giveAway(): void {
    if (this.gone) return;
    this.gone = true;
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
