// A request body on its way to an app: read from the client (or from the buffer a wake filled)
// and written to the upstream connection, re-framed as chunked when its length is unknown, with
// back-pressure (the client is paused while the app's socket is full). Made only for requests
// that have a body. When the exchange ends early, what the app did not take is drained, so the
// client's connection stays usable.

import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';

const noop = () => {};

export class Upload {
  /** The whole body was read from the client. */
  done = false;
  private sock: Socket | undefined;
  private attached = false;

  /** `onError`: reading the client's body failed (the exchange is then over). */
  constructor(
    private readonly source: Readable,
    private readonly chunked: boolean,
    private readonly onError: () => void,
  ) {}

  /** Starts (or, after a retry on a fresh connection, continues) writing to `sock`. */
  attach(sock: Socket): void {
    this.sock = sock;
    if (this.attached) return;
    this.attached = true;
    this.source.on('data', this.onData);
    this.source.once('end', this.onEnd);
    this.source.once('error', this.onError);
  }

  /** The upstream socket drained: read on. */
  drained(): void {
    if (!this.done) this.source.resume();
  }

  /** Stops writing; unread body bytes are drained from the client. */
  detach(): void {
    this.sock = undefined;
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
    let ok: boolean;
    if (this.chunked) {
      s.cork();
      s.write(`${chunk.length.toString(16)}\r\n`);
      s.write(chunk);
      ok = s.write('\r\n');
      s.uncork();
    } else ok = s.write(chunk);
    if (!ok) this.source.pause();
  };

  private readonly onEnd = (): void => {
    this.done = true;
    if (this.chunked) this.sock?.write('0\r\n\r\n');
  };
}
