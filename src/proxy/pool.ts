// Kept-alive TCP connections to the apps on <ip>:80, per upstream: a LIFO free list, a cap on
// connections per upstream with a queue beyond it, a connect time limit, and idle connections
// dropped after a few seconds (apps commonly close theirs at 5 s, and reusing one they are
// closing gives a spurious reset). Socket listeners are attached once per connection and call
// whichever request currently owns it, so a request costs no listener churn. Reads skip node's
// stream machinery (`onread` into one shared buffer): an owner gets views of that buffer and
// must copy whatever it keeps beyond the call. After a thaw an upstream's free connections are
// dropped (dropIdle): the request after it opens its own, or takes the spare made while the app
// was frozen (spare: the kernel completes its handshake without the app, so the request that
// thaws it writes its head at once and the thawed app finds connection and head waiting).
// Fair shares per source (an IPv4 address or an IPv6 /64, ../slots.ts sourceKey; for a request
// forwarded over the channel, the client's address it carries): one source holds at most
// `maxPerSource` of an upstream's connections, so stalled or slow requests of one client cannot
// fill the upstream's `maxSockets` and starve its other clients. A source at its share waits for
// one of its own connections (at most `maxPerSource` of its requests wait; more are refused, the
// caller answers 429); a freed connection goes to the oldest waiter whose source is under its
// share. At most `maxWaiting` requests wait in all: a newcomer to a full queue takes the place of
// the oldest waiter of the source with the most waiting, when that source has at least two more
// than the newcomer's (fair shares, ../slots.ts; the one bumped is told, its caller answers 503),
// else it is refused (503). Counting busy connections is one counter per upstream and source:
// nothing is allocated for a request that does not wait.

import { connect, type Socket } from 'node:net';
import { FairSlots } from '../slots.js';

export interface Upstream {
  host: string;
  port: number;
}

/** The request currently using a connection. */
export interface ConnOwner {
  onData(chunk: Buffer): void;
  onDrain(): void;
  /** The app closed the connection (after `onError` when there was one). */
  onClose(): void;
  onError(err: Error): void;
  onTimeout(): void;
}

/** Every upstream read lands here; reads are handled one at a time on this thread. */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);

export class Conn {
  owner: ConnOwner | undefined;
  /** True once it has carried a complete exchange (a reset on it may be a stale keep-alive). */
  reused = false;
  /** When it went back to the free list. */
  idleSince = 0;
  /** The source (slots.ts sourceKey) of the request holding it; '' while none does. */
  source = '';

  constructor(
    readonly sock: Socket,
    readonly key: string,
    onGone: (c: Conn) => void,
  ) {
    sock.setNoDelay(true);
    sock.on('drain', () => this.owner?.onDrain());
    sock.on('error', (e) => this.owner?.onError(e));
    sock.on('timeout', () => (this.owner ? this.owner.onTimeout() : sock.destroy()));
    sock.on('close', () => {
      const o = this.owner;
      this.owner = undefined;
      o?.onClose();
      onGone(this);
    });
  }
}

/** A request waiting for a connection to its upstream. */
interface Waiter {
  source: string;
  give: (c: Conn) => void;
  bumped: Bumped | undefined;
}

/** Told when its request lost its place in the queue to another source's (fair shares). */
export interface Bumped {
  bumped(): void;
}

/** Why acquire queued nothing: the source holds its share with as many waiting, or the queue is full. */
export type Refusal = 'share' | 'full';

interface Entry {
  free: Conn[];
  busy: number;
  queue: Waiter[];
  upstream: Upstream;
  /** `host:port` of the upstream (the entries' key). */
  key: string;
  /** Busy connections per source (absent: none). */
  held: Map<string, number>;
  /** Queued requests by source (made when the first one waits). */
  waiting: FairSlots<Waiter> | undefined;
  /** A connection opened while the app was frozen, for the next request (spare). */
  spare: Conn | undefined;
}

export interface PoolOptions {
  maxSockets: number;
  /** Most connections to one upstream held by one source (and most of its requests waiting); default maxSockets. */
  maxPerSource?: number;
  /** Most requests waiting for a connection to one upstream; default: no bound. */
  maxWaiting?: number;
  connectTimeout: number;
  /** Inactivity limit of a connection while it carries a request. */
  activeTimeout: number;
  /** How long a free connection is kept. */
  idleTimeout: number;
}

export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();
  private readonly sweeper: NodeJS.Timeout;
  private readonly maxPerSource: number;
  /** close() was called: no spare is opened any more. */
  private closed = false;

  constructor(private readonly opts: PoolOptions) {
    this.maxPerSource = opts.maxPerSource ?? opts.maxSockets;
    // Free connections past idleTimeout are closed by a sweep (and skipped by acquire), so a
    // request costs no timer changes on its socket.
    this.sweeper = setInterval(() => this.sweep(Date.now()), Math.max(250, opts.idleTimeout / 2));
    this.sweeper.unref();
  }

  /**
   * Hands a connection to `give` (at once when one is free or may be opened, later when the
   * upstream is at its cap or `source` at its share). `fresh` skips kept-alive ones. Returns a
   * cancel for a queued wait, or why nothing was queued: `share` when `source` holds its share and
   * as many of its requests wait already, `full` when the queue is full of no larger share's
   * waiters. `bumped` is told when this request, queued, loses its place to another source's.
   */
  acquire(up: Upstream, fresh: boolean, source: string, give: (c: Conn) => void, bumped?: Bumped): (() => void) | Refusal {
    const e = this.entry(up);
    const max = this.maxPerSource;
    if ((e.held.get(source) ?? 0) < max) {
      const spare = fresh || e.busy >= this.opts.maxSockets ? undefined : e.spare;
      if (spare) {
        e.spare = undefined;
        if (!spare.sock.destroyed) {
          spare.sock.setTimeout(this.opts.activeTimeout);
          this.take(e, spare, source);
          give(spare);
          return noop;
        }
      }
      const stale = Date.now() - this.opts.idleTimeout;
      while (!fresh && e.free.length > 0) {
        const c = e.free.pop()!;
        if (c.sock.destroyed || c.idleSince < stale) {
          c.sock.destroy();
          continue;
        }
        this.take(e, c, source);
        give(c);
        return noop;
      }
      if (e.busy < this.opts.maxSockets) {
        const c = this.open(e);
        this.take(e, c, source);
        give(c);
        return noop;
      }
    }
    const waiting = (e.waiting ??= new FairSlots<Waiter>());
    if (waiting.held(source) >= max) return 'share';
    if (e.queue.length >= (this.opts.maxWaiting ?? Infinity)) {
      const victim = waiting.victim(source);
      if (!victim) return 'full';
      this.unqueue(e, victim);
      victim.bumped?.bumped();
    }
    const w: Waiter = { source, give, bumped };
    waiting.add(source, w);
    e.queue.push(w);
    return () => this.unqueue(e, w);
  }

  /** Takes `w` off the queue (when it still is on it). */
  private unqueue(e: Entry, w: Waiter): void {
    const i = e.queue.indexOf(w);
    if (i < 0) return;
    e.queue.splice(i, 1);
    e.waiting?.remove(w.source, w);
  }

  private entry(up: Upstream): Entry {
    const key = keyOf(up);
    let e = this.entries.get(key);
    if (!e) this.entries.set(key, (e = { free: [], busy: 0, queue: [], upstream: up, key, held: new Map(), waiting: undefined, spare: undefined }));
    return e;
  }

  /** `c` is now busy for a request of `source`. */
  private take(e: Entry, c: Conn, source: string): void {
    e.busy++;
    c.source = source;
    e.held.set(source, (e.held.get(source) ?? 0) + 1);
  }

  /** `c` is no longer busy. */
  private untake(e: Entry, c: Conn): void {
    e.busy--;
    count(e.held, c.source, -1);
    c.source = '';
  }

  /** The oldest waiter whose source is under its share, taken off the queue. */
  private nextWaiter(e: Entry): Waiter | undefined {
    const q = e.queue;
    if (q.length === 0) return undefined;
    const max = this.maxPerSource;
    for (let i = 0; i < q.length; i++) {
      const w = q[i];
      if ((e.held.get(w.source) ?? 0) >= max) continue;
      if (i === 0) q.shift();
      else q.splice(i, 1);
      e.waiting?.remove(w.source, w);
      return w;
    }
    return undefined;
  }

  /**
   * Closes the free connections to `up` (after a thaw: an app that wakes from a freeze may be
   * closing the connections it kept alive before it, so the requests after the thaw open new
   * ones — the first one's connect is then the check that the app still listens).
   */
  dropIdle(up: Upstream): void {
    const e = this.entries.get(keyOf(up));
    if (!e) return;
    for (const c of e.free.splice(0)) c.sock.destroy();
  }

  /**
   * Opens a connection to `up` for its next request, kept with no timer until a request takes it
   * or dropSpare closes it: for a dozing server's app, which the kernel connects to while frozen.
   * Nothing when one is kept already.
   */
  spare(up: Upstream): void {
    if (this.closed) return;
    const e = this.entry(up);
    if (e.spare && !e.spare.sock.destroyed) return;
    const c = this.open(e);
    c.reused = true; // a reset on it before an answer gets the request one retry, as on a kept-alive one
    c.sock.setTimeout(0);
    e.spare = c;
  }

  /** Closes the spare connection to `up`, if one is kept (its app was thawed for something else). */
  dropSpare(up: Upstream): void {
    const e = this.entries.get(keyOf(up));
    const c = e?.spare;
    if (!e || !c) return;
    e.spare = undefined;
    c.sock.destroy();
  }

  /** Gives a connection back: kept when `reusable`, else closed. Called once per acquire. */
  release(c: Conn, reusable: boolean): void {
    c.owner = undefined;
    const e = this.entries.get(c.key);
    if (!e) return void c.sock.destroy();
    this.untake(e, c);
    if (reusable && !c.sock.destroyed) {
      c.reused = true;
      const next = this.nextWaiter(e);
      if (next) {
        this.take(e, c, next.source);
        return next.give(c);
      }
      c.idleSince = Date.now();
      e.free.push(c);
      return;
    }
    c.sock.destroy();
    const next = this.nextWaiter(e);
    if (next) {
      const fresh = this.open(e);
      this.take(e, fresh, next.source);
      next.give(fresh);
    }
  }

  private open(e: Entry): Conn {
    let conn: Conn | undefined = undefined;
    const sock = connect({
      host: e.upstream.host,
      port: e.upstream.port,
      onread: {
        buffer: READ_BUFFER,
        callback: (n: number, buf: Uint8Array): boolean => {
          if (conn?.owner) conn.owner.onData((buf as Buffer).subarray(0, n));
          else sock.destroy(); // bytes nobody asked for: the connection is not trusted again
          return true;
        },
      },
    });
    const timer = setTimeout(
      () => sock.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT', connecting: true })),
      this.opts.connectTimeout,
    );
    sock.once('connect', () => clearTimeout(timer));
    sock.once('close', () => clearTimeout(timer));
    sock.setTimeout(this.opts.activeTimeout);
    conn = new Conn(sock, e.key, (c) => this.gone(c));
    return conn;
  }

  private gone(c: Conn): void {
    const e = this.entries.get(c.key);
    if (!e) return;
    const i = e.free.indexOf(c);
    if (i >= 0) e.free.splice(i, 1);
    if (e.spare === c) e.spare = undefined;
    if (e.busy === 0 && e.free.length === 0 && e.queue.length === 0 && !e.spare) this.entries.delete(c.key);
  }

  private sweep(now: number): void {
    for (const e of this.entries.values()) {
      while (e.free.length > 0 && e.free[0].idleSince < now - this.opts.idleTimeout) e.free.shift()!.sock.destroy();
    }
  }

  /** Closes every connection (daemon stop). */
  close(): void {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const e of this.entries.values()) for (const c of [...e.free, ...(e.spare ? [e.spare] : [])]) c.sock.destroy();
    this.entries.clear();
  }
}

/** An upstream's entry key. */
const keyOf = (up: Upstream) => `${up.host}:${up.port}`;

function noop(): void {}

/** Adds `d` to `source`'s counter in `m`, dropping it at zero. */
function count(m: Map<string, number>, source: string, d: number): void {
  const n = (m.get(source) ?? 0) + d;
  if (n > 0) m.set(source, n);
  else m.delete(source);
}
