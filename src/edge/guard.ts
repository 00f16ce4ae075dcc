// Admission and deadlines for the edge's connections, decided before HTTP or TLS sees a byte.
// - At most `maxPerAddress` open connections per source (an IPv4 address or an IPv6 /64), counted
//   across both listeners, and `maxTotal` in all. One over its source's cap is closed at once. At
//   the total a newcomer still gets in while some holder (an IPv4 address or an IPv6 /56) holds
//   at least two more than its own (fair shares, ../slots.ts): that holder's oldest connection
//   waiting for a request head (idle kept-alive, or head or TLS handshake pending) or HTTP/2
//   session with no stream open is closed for it — never one mid-request, a WebSocket or an
//   HTTP/2 session with a stream open. A refused plain HTTP connection first gets a 429 (or 503
//   for the total) {error, detail}; a TLS one is just closed.
// - A connection must deliver a complete request head within `headerTimeout` of opening (TLS
//   handshake included) and, on HTTP/1.1, of the end of its previous answer; else it is closed,
//   with a 408 {error, detail} when it had sent part of a head. Checked by one sweep every
//   headerTimeout/10 (at most 1 s), not per byte, so the deadline holds however the bytes trickle.
// The listeners (server.ts) report what happens on a connection through the Conn attached to its
// socket: a request began or ended, an upgrade or an HTTP/2 stream took it over.

import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { AppError } from '../errors.js';
import { rawError } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { tooMany } from '../ratelimit.js';
import { FairSlots, holderKey, sourceKey } from '../slots.js';

export interface GuardOptions {
  maxPerAddress: number;
  maxTotal: number;
  headerTimeout: number;
  log: Logger;
}

const CONN = Symbol('rootbox.edge.conn');

/** One accepted connection, as the guard follows it. */
export interface Conn {
  readonly key: string;
  /** Its holder for fair shares (slots.ts): an IPv4 address or an IPv6 /56. */
  readonly holder: string;
  readonly sock: Socket;
  readonly tlsListener: boolean;
  /** The TLS socket on top of `sock`, once its handshake is done. */
  tls?: TLSSocket;
  /** HTTP/1.1 requests whose answer has not ended. */
  inflight: number;
  /** Since when (ms) a request head is awaited; 0 while none is (answering, upgraded, HTTP/2). */
  since: number;
  /** Bytes the connection had read when the wait began (more at the deadline: a partial head). */
  mark: number;
  /** Left HTTP/1.1's request/answer turns for good: a WebSocket, or an HTTP/2 session. */
  taken: boolean;
  /** Open streams of its HTTP/2 session (undefined for any other connection): with none it is idle. */
  streams?: number;
  /** The answer of the latest HTTP/1.1 request (what a parser error in its body is answered on). */
  res?: ServerResponse;
  /** A request the lane forwarded and handed back to node's server unanswered: its id, and the error to answer it with (none: forward it again). */
  replay?: { requestId: string; failure?: AppError };
}

/** The source a connection counts against: an IPv4 address, or the /64 of an IPv6 one. */
export const addressKey = sourceKey;

/** A connection a newcomer may take the slot of: waiting for a request head (idle kept-alive,
 *  or its first head or TLS handshake under way) or an HTTP/2 session with no stream open; never
 *  one mid-request, a WebSocket, or an HTTP/2 session with a stream open. */
const takeable = (c: Conn) => c.inflight === 0 && (!c.taken || c.streams === 0);

export class ConnGuard {
  private readonly perKey = new Map<string, number>();
  private readonly conns = new Set<Conn>();
  private readonly slots = new FairSlots<Conn>();
  /** Refused connections still writing their answer (they count toward the total). */
  private closing = 0;
  private timer?: NodeJS.Timeout;

  constructor(private readonly o: GuardOptions) {}

  /** The Conn of a raw or TLS socket the guard admitted. */
  static of(sock: unknown): Conn | undefined {
    return (sock as { [CONN]?: Conn } | undefined)?.[CONN];
  }

  /** Counts a new connection; false (and the socket closed) when its source is full, or the host
   *  is and no other holder has a slot to give up (fair shares: the oldest takeable connection of
   *  the holder holding the most, when it holds at least two more than the newcomer's, is closed). */
  admit(sock: Socket, tlsListener: boolean): boolean {
    const ip = sock.remoteAddress ?? '';
    const key = addressKey(ip);
    const holder = holderKey(ip);
    const n = this.perKey.get(key) ?? 0;
    const full = this.conns.size + this.closing >= this.o.maxTotal;
    const victim = full && n < this.o.maxPerAddress ? this.slots.victim(holder, takeable) : undefined;
    if (n >= this.o.maxPerAddress || (full && !victim)) {
      this.refuse(sock, tlsListener, n >= this.o.maxPerAddress, key);
      return false;
    }
    if (victim) {
      this.release(victim);
      victim.sock.destroy();
      this.o.log.debug('connection closed for a newcomer', { source: victim.key, newcomer: key, reason: 'total cap' });
    }
    this.perKey.set(key, n + 1);
    const c: Conn = { key, holder, sock, tlsListener, inflight: 0, since: Date.now(), mark: 0, taken: false };
    (sock as { [CONN]?: Conn })[CONN] = c;
    this.conns.add(c);
    this.slots.add(holder, c);
    sock.once('close', () => this.release(c));
    return true;
  }

  /** Links a finished TLS handshake to the connection below it. */
  secured(tls: TLSSocket, raw: Socket): void {
    const c = ConnGuard.of(raw);
    if (!c) return;
    c.tls = tls;
    (tls as { [CONN]?: Conn })[CONN] = c;
  }

  requestStarted(c: Conn, res?: ServerResponse): void {
    c.inflight++;
    c.res = res;
    c.since = 0;
  }

  requestEnded(c: Conn): void {
    if (--c.inflight > 0 || c.taken) return;
    c.res = undefined;
    c.since = Date.now();
    c.mark = (c.tls ?? c.sock).bytesRead;
  }

  /** A WebSocket or an HTTP/2 session owns the connection now: no more head deadline. */
  taken(c: Conn): void {
    c.taken = true;
    c.since = 0;
  }

  /** An HTTP/2 stream opened on the connection (its session owns it from the first); returns its end. */
  streamOpened(c: Conn): () => void {
    if (!c.taken) this.taken(c);
    c.streams = (c.streams ?? 0) + 1;
    let open = true;
    return () => {
      if (open) c.streams!--;
      open = false;
    };
  }

  /** Connections a client holds open: per source and in all (tests, figures). */
  count(ip?: string): number {
    return ip === undefined ? this.conns.size : (this.perKey.get(addressKey(ip)) ?? 0);
  }

  start(): void {
    const step = Math.max(25, Math.min(1000, Math.floor(this.o.headerTimeout / 10)));
    this.timer = setInterval(() => this.sweep(), step);
    this.timer.unref();
  }

  /** Closes HTTP/1.1 connections that wait for a request (a stopping edge keeps the busy ones). */
  closeIdle(): void {
    for (const c of this.conns) if (c.inflight === 0 && !c.taken) c.sock.destroy();
  }

  destroyAll(): void {
    clearInterval(this.timer);
    for (const c of this.conns) c.sock.destroy();
  }

  private sweep(): void {
    const limit = Date.now() - this.o.headerTimeout;
    for (const c of this.conns) if (c.since !== 0 && c.since <= limit) this.expire(c);
  }

  private expire(c: Conn): void {
    c.since = 0;
    const s = c.tls ?? c.sock;
    const http1 = c.tlsListener ? c.tls !== undefined && c.tls.alpnProtocol !== 'h2' : true;
    // a partial head on HTTP/1.1 gets an answer; an idle keep-alive, a TLS handshake or an HTTP/2 preface does not
    if (http1 && s.bytesRead > c.mark && s.writable) {
      const secs = Math.round(this.o.headerTimeout / 100) / 10;
      rawError(s, AppError.of('request_timeout', `the request head did not arrive within ${secs} s of the connection opening or of the previous answer`));
    } else c.sock.destroy();
  }

  private refuse(sock: Socket, tlsListener: boolean, perAddress: boolean, key: string): void {
    sock.on('error', () => {});
    this.o.log.debug('connection refused', { source: key, reason: perAddress ? 'per-address cap' : 'total cap' });
    if (tlsListener || this.closing >= this.o.maxTotal) return void sock.destroy();
    this.closing++;
    sock.once('close', () => this.closing--);
    sock.resume(); // whatever it sends is dropped
    rawError(
      sock,
      perAddress
        ? tooMany('too_many_connections', `this address already holds ${this.o.maxPerAddress} open connections to this host; close some`, 1)
        : AppError.of('too_many_connections', `this host holds its maximum of ${this.o.maxTotal} connections; retry shortly`, {
            kind: 'unavailable',
            retryAfter: 1,
          }),
    );
  }

  private release(c: Conn): void {
    if (!this.conns.delete(c)) return;
    this.slots.remove(c.holder, c);
    const n = (this.perKey.get(c.key) ?? 1) - 1;
    if (n <= 0) this.perKey.delete(c.key);
    else this.perKey.set(c.key, n);
  }
}
