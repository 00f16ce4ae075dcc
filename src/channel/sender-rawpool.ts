// The sender's side of the raw lane's connection to one peer host (sender-rawlane.ts): one mutual-TLS
// connection with this host's certificate under the cluster CA (ALPN MUX_ALPN on the same
// cluster.listen as the HTTP/2 session), accepting only a certificate naming the host it meant,
// as the session does (sender-peers.ts), carrying every lane request to that peer as a stream of
// wire-mux.ts frames: a request's head goes out with the others of its turn of the event loop in
// one write, and the answers of many come back in one read. A stream lent to an exchange
// (acquire) is given its answer's bytes and end; the exchange hands bytes to its client and
// credits them (the owner sends at most STREAM_WINDOW ahead), and cancels a stream it leaves.
// At most `max` streams at once per peer (beyond that the caller takes another path: nothing waits
// here). A connection that fails, closes or sends what the wire does not allow is dropped with
// every stream on it; the next request opens a new one. After a connection could not be opened
// (a peer of an older version offers no MUX_ALPN, or is unreachable), none is opened for FAILED_MS:
// the caller takes the HTTP/2 session. Reads skip node's stream machinery (`onread` into one
// shared buffer): an exchange gets views of that buffer, valid during the call only.
// The pool lives as long as the peer's HTTP/2 session: its pings are what find a dead peer out,
// and its end closes the connection here (sender-peers.ts). It also remembers, for DECLINE_MS, the
// servers whose requests the owner's lane did not take (static files): those go by the full path.

import type { OnReadOpts } from 'node:net';
import { connect, type ConnectionOptions, type PeerCertificate } from 'node:tls';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { peerHost, type Identity } from './identity.js';
import { MuxConn, type RawStream, type RawUser } from './sender-stream.js';
import { MUX_ALPN } from './wire-mux.js';

/** Every raw lane read lands here; reads are handled one at a time on this thread. */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);

export interface RawPoolOptions {
  host: string;
  /** host:port of its cluster.listen. */
  advertise: string;
  identity: () => Identity;
  /** Streams at once. */
  max: number;
  connectTimeoutMs: number;
  idleMs: number;
  /** The idle sweep's and the back-offs' time (tests move it). */
  clock?: Clock;
}

const DECLINE_MS = 5_000;
const FAILED_MS = 10_000;

export class RawPool {
  /** Slugs the owner sent back to the full path, and until when. */
  private readonly declines = new Map<string, number>();
  private conn: MuxConn | undefined;
  /** Exchanges waiting for the connection being opened. */
  private waiting: ((c: MuxConn | undefined) => void)[] = [];
  private closed = false;
  /** No connection is opened before this (ms): the last one could not be. */
  private failedUntil = 0;
  private idleSince = 0;
  /** The connection's next stream id at the last sweep. */
  private sweptId = 0;
  private readonly sweeper: Timer;
  private readonly clock: Clock;

  constructor(private readonly o: RawPoolOptions) {
    this.clock = o.clock ?? systemClock;
    this.sweeper = this.clock.every(Math.max(1000, o.idleMs / 2), () => this.sweep(this.clock.now()));
  }

  /**
   * A stream for `user`, given now when the connection is open, else once it is (or
   * `give(undefined)` when it cannot be). False at the cap, or once the pool is closed.
   */
  acquire(user: RawUser, give: (s: RawStream | undefined) => void): boolean {
    if (this.closed) return false;
    const c = this.conn;
    if (c && c.usable()) {
      if (c.streams.size >= this.o.max) return false;
      const s = c.stream(user);
      if (!s) return false;
      give(s);
      return true;
    }
    if (c && c.ready) c.sock.end(); // retired (out of ids) or closing: its streams finish, new ones go on a new connection
    if (this.failedUntil > this.clock.now()) return false;
    if (this.waiting.length >= this.o.max) return false;
    this.waiting.push((conn) => give(conn?.stream(user)));
    if (this.waiting.length === 1) this.open();
    return true;
  }

  /** Whether requests for `slug` go by the full path for now. */
  declined(slug: string): boolean {
    if (this.declines.size === 0) return false;
    const until = this.declines.get(slug);
    if (until === undefined) return false;
    if (until > this.clock.now()) return true;
    this.declines.delete(slug);
    return false;
  }

  decline(slug: string): void {
    if (this.declines.size >= 10_000) this.declines.clear(); // a bound, not a cache policy: the cost of forgetting is one round trip
    this.declines.set(slug, this.clock.now() + DECLINE_MS);
  }

  private open(): void {
    const me = this.o.identity();
    const { hostname, port } = new URL(`https://${this.o.advertise}`);
    let c: MuxConn | undefined = undefined;
    // onread is node's for TLS sockets too (read straight into the buffer), though not in its types
    const onread: OnReadOpts = {
      buffer: READ_BUFFER,
      callback: (n: number, buf: Uint8Array): boolean => {
        c?.read((buf as Buffer).subarray(0, n));
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
      ALPNProtocols: [MUX_ALPN],
      checkServerIdentity: (_name: string, cert: PeerCertificate) =>
        peerHost(cert) === this.o.host ? undefined : new Error(`the channel at ${this.o.advertise} is not ${this.o.host}`),
    } as ConnectionOptions);
    sock.setNoDelay(true);
    const conn = (c = new MuxConn(sock, (gone) => {
      if (this.conn === gone) this.conn = undefined;
    }));
    const t = this.clock.after(this.o.connectTimeoutMs, () => sock.destroy());
    const settle = (ok: boolean) => {
      t.cancel();
      const waiting = this.waiting;
      this.waiting = [];
      if (ok) {
        conn.ready = true;
        this.conn = conn;
        this.idleSince = this.clock.now();
      } else this.failedUntil = this.clock.now() + FAILED_MS;
      for (const w of waiting) w(ok ? conn : undefined);
    };
    const fail = () => settle(false);
    sock.once('close', fail);
    sock.once('secureConnect', () => {
      sock.off('close', fail);
      // a peer of an older version chose no protocol of ours: it is reached over the HTTP/2 session
      if (this.closed || sock.alpnProtocol !== MUX_ALPN) {
        sock.destroy();
        return settle(false);
      }
      settle(true);
    });
  }

  /** Closes the connection once it carried no stream for idleMs. */
  private sweep(now: number): void {
    const c = this.conn;
    if (!c) return;
    // streams under way, or some began since the last look: in use
    if (c.streams.size > 0 || c.nextId !== this.sweptId) this.idleSince = now;
    else if (now - this.idleSince >= this.o.idleMs) c.sock.end();
    this.sweptId = c.nextId;
  }

  /**
   * Opens and lends no more. `cut`: the connection closes now, answers under way with it (a peer
   * that stopped answering pings, a stop of this daemon); else it closes once its answers under
   * way are over (the peer's session ended cleanly: its GOAWAY lets streams under way finish, and
   * so answers under way here).
   */
  close(cut: boolean): void {
    this.closed = true;
    this.sweeper.cancel();
    const c = this.conn;
    if (!c) return;
    if (cut) c.sock.destroy();
    else c.closeWhenIdle();
  }
}
