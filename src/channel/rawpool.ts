// The sender's pool of plain HTTP/1.1 connections to one peer host, for the raw lane (rawlane.ts):
// mutual TLS with this host's certificate under the cluster CA (ALPN http/1.1 on the same
// cluster.listen as the HTTP/2 session), accepting only a certificate naming the host it meant,
// as the session does (peers.ts). A connection carries one request at a time; it goes back to the
// free list (LIFO) only after an answer that ended cleanly, and any byte arriving on a free one,
// an error or a close drops it for good. At most `max` connections per peer (beyond that the
// caller takes another path: nothing waits here); free ones are closed after `idleMs`. Reads skip
// node's stream machinery (`onread` into one shared buffer, as the app pool does): an exchange
// gets views of that buffer, valid during the call only.
// The pool lives as long as the peer's HTTP/2 session: its pings are what find a dead peer out,
// and its end closes every connection here (peers.ts). It also remembers, for DECLINE_MS, the
// servers whose requests the owner's lane did not take (static files): those go by the full path;
// and after a connection that could not be opened (a peer of an older version offers no
// http/1.1, or is unreachable), it opens none for FAILED_MS: the caller takes the HTTP/2 session.

import type { OnReadOpts } from 'node:net';
import { connect, type ConnectionOptions, type PeerCertificate, type TLSSocket } from 'node:tls';
import { peerHost, type Identity } from './identity.js';

/** Every raw lane read lands here; reads are handled one at a time on this thread. */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);

/** The exchange a connection currently carries. */
export interface RawUser {
  /** Bytes of the answer: a view of the shared read buffer, valid only during the call. */
  onData(chunk: Buffer): void;
  /** The connection closed or failed before the exchange let it go. */
  onGone(): void;
}

export class RawConn {
  user: RawUser | undefined;
  /** When it went back to the free list. */
  idleSince = 0;
  /** The handshake is done (before that, a close is a failed connect). */
  ready = false;

  constructor(
    readonly sock: TLSSocket,
    onGone: (c: RawConn) => void,
  ) {
    sock.on('error', noop);
    sock.on('close', () => {
      const u = this.user;
      this.user = undefined;
      onGone(this);
      u?.onGone();
    });
  }
}

export interface RawPoolOptions {
  host: string;
  /** host:port of its cluster.listen. */
  advertise: string;
  identity: () => Identity;
  max: number;
  connectTimeoutMs: number;
  idleMs: number;
}

const DECLINE_MS = 5_000;
const FAILED_MS = 10_000;

export class RawPool {
  /** Slugs the owner sent back to the full path, and until when. */
  private readonly declines = new Map<string, number>();
  private readonly free: RawConn[] = [];
  /** Connections open or opening, free ones included. */
  private readonly all = new Set<TLSSocket>();
  private closed = false;
  /** No connection is opened before this (ms): the last one could not be. */
  private failedUntil = 0;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly o: RawPoolOptions) {
    this.sweeper = setInterval(() => this.sweep(Date.now()), Math.max(1000, o.idleMs / 2)).unref();
  }

  /**
   * A free connection now, else one opened for this call and given once its handshake is done
   * (or `give(undefined)` when it fails). False at the cap, or once the pool is closed.
   */
  acquire(give: (c: RawConn | undefined) => void): boolean {
    const stale = Date.now() - this.o.idleMs;
    while (this.free.length > 0) {
      const c = this.free.pop()!;
      if (c.sock.destroyed || !c.sock.writable || c.idleSince < stale) {
        c.sock.destroy();
        continue;
      }
      give(c);
      return true;
    }
    if (this.closed || this.all.size >= this.o.max || (this.failedUntil && this.failedUntil > Date.now())) return false;
    this.open(give);
    return true;
  }

  /** Whether requests for `slug` go by the full path for now. */
  declined(slug: string): boolean {
    if (this.declines.size === 0) return false;
    const until = this.declines.get(slug);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.declines.delete(slug);
    return false;
  }

  decline(slug: string): void {
    if (this.declines.size >= 10_000) this.declines.clear(); // a bound, not a cache policy: the cost of forgetting is one round trip
    this.declines.set(slug, Date.now() + DECLINE_MS);
  }

  /** Gives a connection back after its exchange: kept only when its answer ended cleanly. */
  release(c: RawConn, reusable: boolean): void {
    c.user = undefined;
    if (!reusable || this.closed || c.sock.destroyed || !c.sock.writable) return void c.sock.destroy();
    c.idleSince = Date.now();
    this.free.push(c);
  }

  private open(give: (c: RawConn | undefined) => void): void {
    const me = this.o.identity();
    const { hostname, port } = new URL(`https://${this.o.advertise}`);
    let c: RawConn | undefined = undefined;
    // onread is node's for TLS sockets too (read straight into the buffer), though not in its types
    const onread: OnReadOpts = {
      buffer: READ_BUFFER,
      callback: (n: number, buf: Uint8Array): boolean => {
        if (c?.user) c.user.onData((buf as Buffer).subarray(0, n));
        else sock.destroy(); // bytes nobody asked for: the connection is not trusted again
        return true;
      },
    };
    const sock = connect({
      onread,
      host: hostname.replace(/^\[|\]$/g, ''),
      port: Number(port),
      ca: me.ca,
      cert: me.cert,
      key: me.key,
      servername: this.o.host,
      ALPNProtocols: ['http/1.1'],
      checkServerIdentity: (_name: string, cert: PeerCertificate) =>
        peerHost(cert) === this.o.host ? undefined : new Error(`the channel at ${this.o.advertise} is not ${this.o.host}`),
    } as ConnectionOptions);
    sock.setNoDelay(true);
    this.all.add(sock);
    const conn = (c = new RawConn(sock, () => this.all.delete(sock)));
    const t = setTimeout(() => sock.destroy(), this.o.connectTimeoutMs);
    let given = false;
    const fail = () => {
      clearTimeout(t);
      this.failedUntil = Date.now() + FAILED_MS;
      if (!given) ((given = true), give(undefined));
    };
    sock.once('close', fail);
    sock.once('secureConnect', () => {
      clearTimeout(t);
      sock.off('close', fail);
      conn.ready = true;
      given = true;
      if (this.closed) {
        sock.destroy();
        return give(undefined);
      }
      give(conn);
    });
  }

  private sweep(now: number): void {
    while (this.free.length > 0 && this.free[0].idleSince < now - this.o.idleMs) this.free.shift()!.sock.destroy();
  }

  /**
   * Opens and lends no more. `cut`: every connection closes now, answers under way with them (a
   * peer that stopped answering pings, a stop of this daemon); else free ones close now and busy
   * ones when their answer is over (the peer's session ended cleanly: its GOAWAY lets streams
   * under way finish, and so answers under way here).
   */
  close(cut: boolean): void {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const c of this.free) c.sock.destroy();
    this.free.length = 0;
    if (cut) for (const s of this.all) s.destroy();
  }
}

function noop(): void {}
