// What both forwards — the full path's Exchange (exchange.ts) and the lane's DirectExchange
// (direct.ts) — do with the app's connection they hold (a pool.ts ConnOwner): the app closing it
// ends a close-delimited answer (else the answer failed), an error fails it, inactivity times it
// out, and a kept-alive connection the app closed just as it was reused gets the request again,
// once, on a new connection, when nothing came back yet and the request can be sent again. While
// the client's side is full, the app's connection is not read (back-pressure) until it drains.

import { codeOf } from './failures.js';
import type { ResponseReader } from '../h1/index.js';
import type { Conn, ConnOwner, UpstreamPool } from './pool.js';

export abstract class UpstreamTurn implements ConnOwner {
  protected conn: Conn | undefined;
  protected reader!: ResponseReader;
  protected settled = false;
  /** Any byte came back on the current connection. */
  protected answered = false;
  protected retried = false;
  protected timedOut = false;
  /** The app's connection is not read until the client's side drains. */
  private paused = false;

  abstract onData(chunk: Buffer): void;
  abstract start(): unknown;
  /** The request can be sent again: bodiless (GET or HEAD) with no body under way. */
  protected abstract resendable(): boolean;
  protected abstract readonly pool: UpstreamPool;
  /** Where the answer goes: its 'drain' resumes reading the app. */
  protected abstract client(): NodeJS.EventEmitter;
  protected abstract fail(err: Error): void;

  onDrain(): void {}

  /** The client's side is full (a write returned false): stop reading the app until it drains. */
  protected holdApp(): void {
    if (this.paused || !this.conn) return;
    this.paused = true;
    this.conn.sock.pause();
    this.client().once('drain', this.resumeUp);
  }

  private readonly resumeUp = (): void => {
    this.paused = false;
    this.conn?.sock.resume();
  };

  /** Gives the app's connection back to the pool (kept when `reusable`), reading it again if it was held. */
  protected release(reusable: boolean): void {
    const c = this.conn;
    if (!c) return;
    this.conn = undefined;
    if (this.paused) {
      this.paused = false;
      this.client().off('drain', this.resumeUp);
      c.sock.resume();
    }
    this.pool.release(c, reusable);
  }

  onClose(): void {
    if (this.settled) return;
    if (this.mayRetry(undefined)) return this.retry();
    try {
      this.reader.eof(); // ends a close-delimited answer, else throws
    } catch (e) {
      this.fail(e as Error);
    }
  }

  onError(err: Error): void {
    if (this.settled) return;
    if (this.mayRetry(err)) return this.retry();
    this.fail(err);
  }

  onTimeout(): void {
    this.timedOut = true;
    this.fail(Object.assign(new Error('upstream inactivity timeout'), { code: 'ETIMEDOUT' }));
  }

  private mayRetry(err: Error | undefined): boolean {
    const code = err && codeOf(err);
    return !this.answered && !this.retried && !!this.conn?.reused && this.resendable() && (!err || code === 'ECONNRESET' || code === 'EPIPE');
  }

  private retry(): void {
    this.retried = true;
    this.release(false);
    this.start();
  }
}
