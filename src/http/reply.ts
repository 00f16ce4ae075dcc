// Writes a Reply to either kind of response object, unless the response already started.

import type { Reply, Res } from './types.js';

export function sendReply(res: Res, reply: Reply, headOnly = false): number {
  if (res.headersSent || res.writableEnded || (res as { destroyed?: boolean }).destroyed) return res.statusCode;
  const headers: Record<string, string | string[]> = { ...(reply.headers ?? {}) };
  let payload: Buffer | string | undefined;
  if (reply.body === undefined || reply.body === null) payload = undefined;
  else if (typeof reply.body === 'string' || Buffer.isBuffer(reply.body)) payload = reply.body;
  else {
    payload = JSON.stringify(reply.body);
    headers['content-type'] ??= 'application/json; charset=utf-8';
  }
  if (payload !== undefined) headers['content-length'] = String(Buffer.byteLength(payload));
  res.writeHead(reply.status, headers as never);
  if (headOnly || payload === undefined) res.end();
  else res.end(payload);
  return reply.status;
}

export const json = (status: number, body: unknown, headers?: Record<string, string>): Reply => ({ status, body, headers });
