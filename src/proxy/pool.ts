// Kept-alive TCP connections to the apps on <ip>:80, per upstream: a LIFO free list, a cap on
// connections per upstream with a queue beyond it, a connect time limit, and idle connections
// dropped after a few seconds (apps commonly close theirs at 5 s, and reusing one they are
// closing gives a spurious reset). Socket listeners are attached once per connection and call
// whichever request currently owns it, so a request costs no listener churn. Reads skip node's
// stream machinery (`onread` into one shared buffer): an owner gets views of that buffer and
// must copy whatever it keeps beyond the call. A connection may be opened ahead of a request
// (preconnect: the check after a thaw that the app still listens, then the request's own).

import { connect, type Socket } from 'node:net';

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

interface Entry {
  free: Conn[];
  busy: number;
  queue: Array<(c: Conn) => void>;
  upstream: Upstream;
}

export interface PoolOptions {
  maxSockets: number;
  connectTimeout: number;
  /** Inactivity limit of a connection while it carries a request. */
  activeTimeout: number;
  /** How long a free connection is kept. */
  idleTimeout: number;
}

export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly opts: PoolOptions) {
    // Free connections past idleTimeout are closed by a sweep (and skipped by acquire), so a
    // request costs no timer changes on its socket.
    this.sweeper = setInterval(() => this.sweep(Date.now()), Math.max(250, opts.idleTimeout / 2));
    this.sweeper.unref();
  }

  /**
   * Hands a connection to `give` (at once when one is free or may be opened, later when the
   * upstream is at its cap). `fresh` skips kept-alive ones. Returns a cancel for a queued wait.
   */
  acquire(up: Upstream, fresh: boolean, give: (c: Conn) => void): () => void {
    const key = `${up.host}:${up.port}`;
    let e = this.entries.get(key);
    if (!e) this.entries.set(key, (e = { free: [], busy: 0, queue: [], upstream: up }));
    const stale = Date.now() - this.opts.idleTimeout;
    while (!fresh && e.free.length > 0) {
      const c = e.free.pop()!;
      if (c.sock.destroyed || c.idleSince < stale) {
        c.sock.destroy();
        continue;
      }
      e.busy++;
      give(c);
      return noop;
    }
    if (e.busy < this.opts.maxSockets) {
      e.busy++;
      give(this.open(e, key));
      return noop;
    }
    const entry = e;
    entry.queue.push(give);
    return () => {
      const i = entry.queue.indexOf(give);
      if (i >= 0) entry.queue.splice(i, 1);
    };
  }

  /**
   * Opens one connection ahead of a request and keeps it free for the next acquire (after a
   * thaw: its connect is the check that the app still listens, and the request then goes over
   * it — no probe connection for the app to accept first). True once connected; false when the
   * connect fails or the upstream is at its cap (nothing opened then).
   */
  preconnect(up: Upstream): Promise<boolean> {
    const key = `${up.host}:${up.port}`;
    let e = this.entries.get(key);
    if (!e) this.entries.set(key, (e = { free: [], busy: 0, queue: [], upstream: up }));
    if (e.busy >= this.opts.maxSockets) return Promise.resolve(false);
    e.busy++;
    const c = this.open(e, key);
    return new Promise((resolve) => {
      // until connected the pool's own bookkeeping owns it, as an exchange would
      c.owner = { onData: noop, onDrain: noop, onError: noop, onTimeout: () => c.sock.destroy(), onClose: () => (this.release(c, false), resolve(false)) };
      c.sock.once('connect', () => {
        const entry = this.entries.get(key);
        if (!entry) return void c.sock.destroy(); // the pool was closed meanwhile (onClose answers)
        c.owner = undefined;
        entry.busy--;
        const next = entry.queue.shift();
        if (next) {
          entry.busy++;
          next(c);
        } else {
          c.idleSince = Date.now();
          entry.free.push(c);
        }
        resolve(true);
      });
    });
  }

  /** Gives a connection back: kept when `reusable`, else closed. Called once per acquire. */
  release(c: Conn, reusable: boolean): void {
    c.owner = undefined;
    const e = this.entries.get(c.key);
    if (!e) return void c.sock.destroy();
    e.busy--;
    if (reusable && !c.sock.destroyed) {
      c.reused = true;
      const next = e.queue.shift();
      if (next) {
        e.busy++;
        return next(c);
      }
      c.idleSince = Date.now();
      e.free.push(c);
      return;
    }
    c.sock.destroy();
    const next = e.queue.shift();
    if (next) {
      e.busy++;
      next(this.open(e, c.key));
    }
  }

  private open(e: Entry, key: string): Conn {
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
    conn = new Conn(sock, key, (c) => this.gone(c));
    return conn;
  }

  private gone(c: Conn): void {
    const e = this.entries.get(c.key);
    if (!e) return;
    const i = e.free.indexOf(c);
    if (i >= 0) e.free.splice(i, 1);
    if (e.busy === 0 && e.free.length === 0 && e.queue.length === 0) this.entries.delete(c.key);
  }

  private sweep(now: number): void {
    for (const e of this.entries.values()) {
      while (e.free.length > 0 && e.free[0].idleSince < now - this.opts.idleTimeout) e.free.shift()!.sock.destroy();
    }
  }

  /** Closes every connection (daemon stop). */
  close(): void {
    clearInterval(this.sweeper);
    for (const e of this.entries.values()) for (const c of e.free) c.sock.destroy();
    this.entries.clear();
  }
}

function noop(): void {}
