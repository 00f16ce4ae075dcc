// A forwarded request's body as the sender's full path keeps it (front.ts): whether there is one,
// and its first `cap` bytes read into memory so the request can be sent again after "not here".

import type { Readable } from 'node:stream';
import type { Req } from '../http/index.js';

export function hasBody(req: Req): boolean {
  const len = req.headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
  return stream ? stream.endAfterHeaders === false : false;
}

/** Reads up to `cap` bytes of a body: all of it (`whole`) or the first part, the rest left unread. */
export function buffer(req: Readable, cap: number): Promise<{ chunks: Buffer[]; whole: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    const done = (whole: boolean) => {
      req.off('data', onData).off('end', onEnd).off('error', onError);
      resolve({ chunks, whole });
    };
    const onData = (c: Buffer) => {
      chunks.push(c);
      n += c.length;
      if (n > cap) {
        req.pause();
        done(false);
      }
    };
    const onEnd = () => done(true);
    const onError = (e: Error) => {
      req.off('data', onData).off('end', onEnd);
      reject(e);
    };
    req.on('data', onData).on('end', onEnd).on('error', onError);
  });
}
