// A WebSocket over the channel: the sender's edge carries the client's upgrade request on one
// HTTP/2 stream and then both byte streams, untouched, in its DATA frames; on the owner the stream
// becomes the socket the proxy's upgrade path expects (it writes the app's 101 and its frames
// there, or an error answer) and the handshake a request with the client's head. The socket
// counts what it handed to the stream (billing's egress measure of a raw socket).

import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest, ServerHttp2Stream } from 'node:http2';
import { Duplex } from 'node:stream';

export class StreamSocket extends Duplex {
  private sent = 0;
  readonly remoteAddress: string;

  constructor(
    private readonly input: Http2ServerRequest,
    private readonly stream: ServerHttp2Stream,
    clientIp: string,
  ) {
    super({ allowHalfOpen: false });
    this.remoteAddress = clientIp;
    input.on('data', (c: Buffer) => {
      if (!this.push(c)) input.pause();
    });
    input.on('end', () => this.push(null));
    stream.on('close', () => this.destroy());
    stream.on('error', () => this.destroy());
  }

  /** What left through the stream, plus what waits (egress subtracts writableLength). */
  get bytesWritten(): number {
    return this.sent + this.writableLength;
  }

  override _read(): void {
    this.input.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    if (this.stream.destroyed) return cb(new Error('the channel stream closed'));
    this.stream.write(chunk, (err) => {
      if (!err) this.sent += chunk.length;
      cb(err);
    });
  }

  override _final(cb: (e?: Error | null) => void): void {
    if (!this.stream.destroyed) this.stream.end();
    cb();
  }

  override _destroy(err: Error | null, cb: (e: Error | null) => void): void {
    if (!this.stream.destroyed) this.stream.close();
    cb(err);
  }

  // what http-proxy-3 sets on a client socket: meaningless on a stream
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  destroySoon(): void {
    if (this.writable) this.end();
    if (this.writableFinished) this.destroy();
    else this.once('finish', () => this.destroy());
  }
}

/** The client's WebSocket handshake as the proxy's upgrade path reads it (an HTTP/1.1 request). */
export function handshakeOf(req: Http2ServerRequest, socket: StreamSocket, upgrade: string, host: string): IncomingMessage {
  const headers: Record<string, string | string[] | undefined> = {};
  for (const [k, v] of Object.entries(req.headers)) if (k.charCodeAt(0) !== 58) headers[k] = v;
  headers.host = host;
  headers.connection = 'Upgrade';
  headers.upgrade = upgrade;
  return {
    method: 'GET',
    url: req.url,
    headers,
    httpVersion: '1.1',
    httpVersionMajor: 1,
    httpVersionMinor: 1,
    socket,
    connection: socket,
  } as unknown as IncomingMessage;
}
