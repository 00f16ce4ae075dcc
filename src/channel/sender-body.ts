// A forwarded request's body as the sender's full path keeps it (sender-front.ts, sender-api.ts): whether there
// is one, and its first `cap` bytes read into memory so the request can be sent again after "not
// here" — within a budget of such copies per source (an IPv4 address, an IPv6 /64: the clients
// of one source together) and for the host (every source together). A body that would go beyond
// any of the three is streamed at once without a copy (no retry then): stalled uploads cost this
// host at most the budget, however many there are.

import type { Readable } from 'node:stream';
import type { Req } from '../http/index.js';
import { sourceKey } from '../slots.js';

export function hasBody(req: Req): boolean {
  const len = req.headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
  return stream ? stream.endAfterHeaders === false : false;
}

/** The bytes one body holds of a RetryBudget: taken as they are read, given back at once by release(). */
export interface Hold {
  take(n: number): boolean;
  release(): void;
}

/** Bytes of bodies kept for a retry, bounded per source and in total. */
export class RetryBudget {
  private readonly bySource = new Map<string, number>();
  private total = 0;

  constructor(
    readonly perSource: number,
    readonly max: number,
  ) {}

  /** Bytes held now, every source together. */
  get held(): number {
    return this.total;
  }

  /** Bytes held now by the source of `ip`. */
  heldBy(ip: string): number {
    return this.bySource.get(sourceKey(ip)) ?? 0;
  }

  /** A hold for one body from `ip`: each take() within both bounds or nothing taken. */
  hold(ip: string): Hold {
    const key = sourceKey(ip);
    let mine = 0;
    return {
      take: (n) => {
        const source = this.bySource.get(key) ?? 0;
        if (source + n > this.perSource || this.total + n > this.max) return false;
        this.bySource.set(key, source + n);
        this.total += n;
        mine += n;
        return true;
      },
      release: () => {
        if (!mine) return;
        const left = (this.bySource.get(key) ?? mine) - mine;
        if (left > 0) this.bySource.set(key, left);
        else this.bySource.delete(key);
        this.total -= mine;
        mine = 0;
      },
    };
  }
}

/** Reads a body while `hold` takes its bytes, up to `cap`: all of it (`whole`), or nothing when it
 *  is longer than `cap` or the hold refuses (the hold given back, what was read put back into the
 *  stream: nothing stays referenced here while it is sent); `gone` when the client went away
 *  before its end. */
export function buffer(req: Readable, cap: number, hold: Hold): Promise<{ chunks: Buffer[]; whole: boolean; gone?: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    // over HTTP/1.1 a client that ends its side mid-body is gone (the edge's sockets allow half
    // open: the request itself would wait for the rest of its body for ever)
    const m = req as Readable & { httpVersionMajor?: number; socket?: Readable | null; complete?: boolean };
    const socket = m.httpVersionMajor === 1 ? m.socket : null;
    const onSocketGone = () => {
      if (!m.complete) onClose(); // a complete body still ends (its 'end' comes after the socket's)
    };
    const off = () => {
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      socket?.off('end', onSocketGone).off('close', onSocketGone);
    };
    const done = (whole: boolean) => {
      off();
      resolve({ chunks, whole });
    };
    const onData = (c: Buffer) => {
      chunks.push(c);
      n += c.length;
      if (n > cap || !hold.take(c.length)) {
        // no copy: what was read goes back to the front of the stream, which is sent as it comes
        req.pause();
        hold.release();
        off();
        for (let i = chunks.length - 1; i >= 0; i--) req.unshift(chunks[i]);
        resolve({ chunks: [], whole: false });
      }
    };
    const onEnd = () => done(true);
    const onError = (e: Error) => {
      off();
      hold.release();
      reject(e);
    };
    const onClose = () => {
      off();
      hold.release();
      resolve({ chunks: [], whole: true, gone: true });
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
    socket?.on('end', onSocketGone).on('close', onSocketGone);
  });
}
