// The raw lane's wire (sender-rawpool.ts on the sender, owner-raw.ts on the owner): many lane requests
// multiplexed over one mutual-TLS connection per peer, so a batch of requests (and of answers)
// costs one TLS record and one write, not one per request. A frame is a 9-byte header — type (1),
// stream id (4), payload length (4) — and its payload:
//   HEAD   sender → owner  the request head, HTTP/1.1 text (sender-rawlane.ts rawHead)
//   CANCEL sender → owner  the client left: the owner stops answering (no payload)
//   CREDIT sender → owner  bytes of the answer the sender handed to its client (u32): the owner
//                          sends at most WINDOW bytes of a stream's answer ahead of its credit
//   DATA   owner → sender  bytes of the answer, HTTP/1.1 as they go to the client
//   END    owner → sender  the stream is over (u8: ANSWERED, CUT or REPLAY; a replay's failure
//                          follows as JSON {code, detail}); its id is never used again
// Ids are odd and only grow; a connection that would run out of them is not lent again. A frame
// longer than its type allows ends the connection. Outbox gathers what one turn of the event loop
// sends on a connection into one write, made once the batch of events is handled (setImmediate
// runs right after the poll phase: the delay is the rest of the batch, nothing when idle).

import type { Socket } from 'node:net';

export const HEAD = 1;
export const DATA = 2;
export const END = 3;
export const CANCEL = 4;
export const CREDIT = 5;

export const ANSWERED = 0;
export const CUT = 1;
export const REPLAY = 2;

/** The ALPN name of the multiplexed raw lane (beside h2 on cluster.listen). */
export const MUX_ALPN = 'rootbox-lane/1';
/** Answer bytes a stream may have in flight beyond what the sender handed to its client. */
export const STREAM_WINDOW = 256 * 1024;
/** The largest DATA payload (longer writes are split). */
export const MAX_DATA = 64 * 1024;
/** Streams one connection carries at once. */
export const MAX_STREAMS = 4096;
/** Ids a connection hands out before it is retired (odd, growing). */
export const LAST_ID = 0x7fff_fff0;

const HEADER = 9;
/** The longest payload of each frame type (an END carries a failure's code and detail). */
const LIMIT: Record<number, number> = { [HEAD]: 64 * 1024, [DATA]: MAX_DATA, [END]: 8 * 1024, [CANCEL]: 0, [CREDIT]: 4 };

export type OnFrame = (type: number, id: number, payload: Buffer) => void;

export class FrameError extends Error {}

/**
 * Cuts a byte stream into frames. Payloads are views of the bytes given (valid during the call
 * only when the caller reuses its buffer); a frame split across reads is kept in a copy.
 */
export class FrameReader {
  private rest: Buffer | undefined;

  constructor(private readonly onFrame: OnFrame) {}

  feed(chunk: Buffer): void {
    let buf = chunk;
    if (this.rest) {
      buf = Buffer.concat([this.rest, chunk]);
      this.rest = undefined;
    }
    let at = 0;
    while (buf.length - at >= HEADER) {
      const type = buf[at];
      const id = buf.readUInt32BE(at + 1);
      const len = buf.readUInt32BE(at + 5);
      const limit = LIMIT[type];
      if (limit === undefined || len > limit) throw new FrameError(`a frame of type ${type} and ${len} bytes`);
      if (buf.length - at - HEADER < len) break;
      const start = at + HEADER;
      at = start + len;
      this.onFrame(type, id, buf.subarray(start, at));
    }
    if (at < buf.length) this.rest = Buffer.from(buf.subarray(at)); // a copy: the caller may reuse its buffer
  }
}

/** A frame's header. */
export function header(type: number, id: number, len: number): Buffer {
  const h = Buffer.allocUnsafe(HEADER);
  h[0] = type;
  h.writeUInt32BE(id, 1);
  h.writeUInt32BE(len, 5);
  return h;
}

/** What one connection sends in this turn of the event loop, written as one buffer after it. */
export class Outbox {
  private parts: Buffer[] = [];
  private size = 0;
  private scheduled = false;

  constructor(
    private readonly sock: Socket,
    /** Told after each write, and whether the bytes went to the socket (the owner settles its streams' byte counts). */
    private readonly flushed?: (sent: boolean) => void,
  ) {}

  private readonly flush = (): void => {
    this.scheduled = false;
    const parts = this.parts;
    const size = this.size;
    this.parts = [];
    this.size = 0;
    const sent = !this.sock.destroyed;
    if (parts.length > 0 && sent) this.sock.write(parts.length === 1 ? parts[0] : Buffer.concat(parts, size));
    this.flushed?.(sent);
  };

  /** Queues a frame (a Buffer payload is kept as it is, not copied: its caller hands it over). */
  frame(type: number, id: number, payload?: Buffer | string): void {
    const body = typeof payload === 'string' ? Buffer.from(payload, 'latin1') : payload;
    this.push(header(type, id, body?.length ?? 0));
    if (body && body.length > 0) this.push(body);
  }

  /** Bytes queued and not yet handed to the socket. */
  get queued(): number {
    return this.size;
  }

  private push(b: Buffer): void {
    this.parts.push(b);
    this.size += b.length;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }
}
