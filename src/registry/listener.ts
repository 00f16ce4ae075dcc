// The placement cache's dedicated LISTEN connection on the change feed's channel (feed.ts): each
// notification is handed on as its version; a lost connection (killed, the registry
// restarted or failed over) is re-opened with a backoff (doubling up to 8× the first wait), and
// every (re)open is told, since what committed while nobody listened is only found by a catch-up
// (NOTIFY has no replay).

import pg from 'pg';
import type { Logger } from '../log/index.js';
import { FEED_CHANNEL, notified } from './feed.js';
import type { RegistryPool } from './pool.js';

export interface FeedListenerOptions {
  /** First wait before re-opening a lost connection (default 200 ms). */
  reconnectMs?: number;
  connectTimeoutMs: number;
  /** A change was notified, at this version. */
  onChange: (version: number) => void;
  /** The connection is open (again): catch up on what committed meanwhile. */
  onOpen: () => Promise<void>;
}

export class FeedListener {
  private client?: pg.Client;
  private running = false;
  private retry?: NodeJS.Timeout;
  private backoff: number;
  /** How many times the connection was (re)opened; for tests and status. */
  listens = 0;

  constructor(
    private readonly pool: RegistryPool,
    private readonly o: FeedListenerOptions,
    private readonly log?: Logger,
  ) {
    this.backoff = o.reconnectMs ?? 200;
  }

  /** Whether the connection is open now (changes arrive as they commit). */
  get listening(): boolean {
    return this.client !== undefined;
  }

  /** Opens the connection (resolves once it is open and `onOpen` done, or it failed: then it retries later). */
  async start(): Promise<void> {
    this.running = true;
    await this.listen();
  }

  /** Opens it now if it is lost and no retry is waiting (the cache's timer, as a safety net). */
  ensure(): void {
    if (!this.client && !this.retry && this.running) void this.listen();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.retry);
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => {});
  }

  private async listen(): Promise<void> {
    if (!this.running || this.client) return;
    await this.pool.ready(); // a multi-host URL: the host that takes writes, as the pool found it
    if (!this.running || this.client) return;
    const c = new pg.Client({ connectionString: this.pool.target, connectionTimeoutMillis: this.o.connectTimeoutMs, keepAlive: true });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (this.client === c) this.client = undefined;
      void c.end().catch(() => {});
      if (this.running) this.later();
    };
    c.on('error', onLost);
    c.on('end', onLost);
    c.on('notification', (n) => {
      const got = n.channel === FEED_CHANNEL ? notified(n.payload) : undefined;
      if (got) this.o.onChange(got.version);
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${FEED_CHANNEL}`);
    } catch {
      onLost();
      // a failed connect also makes the pool look for the primary (after a failover)
      await this.pool.query('SELECT 1').catch(() => {});
      return;
    }
    if (lost || !this.running) return;
    this.client = c;
    this.listens++;
    this.backoff = this.o.reconnectMs ?? 200;
    this.log?.debug('placements: listening', { listens: this.listens });
    await this.o.onOpen();
  }

  private later(): void {
    if (this.retry) return;
    const wait = this.backoff;
    this.backoff = Math.min(this.backoff * 2, (this.o.reconnectMs ?? 200) * 8);
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.listen();
    }, wait);
    this.retry.unref();
  }
}
