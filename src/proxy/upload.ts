// A request body on its way to an app: read from the client (or from the buffer a wake filled)
// and written to the upstream connection, re-framed as chunked when its length is unknown, with
// back-pressure (the client is paused while the app's socket is full). Made only for requests
// that have a body. When the exchange ends early, what the app did not take is drained, so the
// client's connection stays usable. A body that brings no byte for `idle` ms while the app takes
// what it gets (not while the app's socket is full) is reported stalled (`onStall`): the exchange
// then ends, freeing the app's connection. One timer per body, re-armed only when it fires.

import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';

const noop = () => {};

export class Upload {
  /** The whole body was read from the client. */
  done = false;
  private sock: Socket | undefined;
  private attached = false;
  /** When the last body byte came (or the app's socket drained). */
  private last = 0;
  /** Paused because the app's socket is full: not the client's stall. */
  private held = false;
  private timer: NodeJS.Timeout | undefined;

  /**
   * `onError`: reading the client's body failed (the exchange is then over). `idle` (ms, 0: never)
   * and `onStall`: the body brought nothing for that long.
   */
  constructor(
    private readonly source: Readable,
    private readonly chunked: boolean,
    private readonly onError: () => void,
    private readonly idle = 0,
    private readonly onStall: () => void = noop,
  ) {}

  /** Starts (or, after a retry on a fresh connection, continues) writing to `sock`. */
  attach(sock: Socket): void {
    this.sock = sock;
    if (this.attached) return;
    this.attached = true;
    if (this.idle > 0) {
      this.last = Date.now();
      this.timer = setTimeout(this.check, this.idle).unref();
    }
    this.source.on('data', this.onData);
    this.source.once('end', this.onEnd);
    this.source.once('error', this.onError);
  }

  /** The upstream socket drained: read on. */
  drained(): void {
    if (this.done) return;
    if (this.held) {
      this.held = false;
      this.last = Date.now();
    }
    this.source.resume();
  }

  /** Stops writing; unread body bytes are drained from the client. */
  detach(): void {
    this.sock = undefined;
    clearTimeout(this.timer);
    if (!this.attached) return;
    const s = this.source;
    s.off('data', this.onData);
    s.off('end', this.onEnd);
    s.off('error', this.onError);
    s.on('error', noop);
    if (!this.done) s.resume();
  }

  private readonly onData = (chunk: Buffer): void => {
    const s = this.sock;
    if (!s || chunk.length === 0) return;
    if (this.timer) this.last = Date.now();
    let ok: boolean;
    if (this.chunked) {
      s.cork();
      s.write(`${chunk.length.toString(16)}\r\n`);
      s.write(chunk);
      ok = s.write('\r\n');
      s.uncork();
    } else ok = s.write(chunk);
    if (!ok) {
      this.held = true;
      this.source.pause();
    }
  };

  /** The idle timer fired: re-armed for what is left, or the body stalled. */
  private readonly check = (): void => {
    this.timer = undefined;
    if (this.done || !this.sock) return;
    const left = this.last + this.idle - Date.now();
    if (this.held || left > 0) {
      this.timer = setTimeout(this.check, this.held ? this.idle : left).unref();
      return;
    }
    this.onStall();
  };

  private readonly onEnd = (): void => {
    this.done = true;
    clearTimeout(this.timer);
    if (this.chunked) this.sock?.write('0\r\n\r\n');
  };
}
