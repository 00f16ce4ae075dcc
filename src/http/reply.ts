// Writes a Reply to either kind of response object, unless the response already started; or,
// with no response object (a refused connection, an upgrade request), straight onto the socket.

import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Reply, Res } from './types.js';

/** How long a socket closed after a raw answer waits for the client to take it and close. */
const LINGER_MS = 1000;

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

/**
 * Writes a Reply onto a socket as an HTTP/1.1 answer with Connection: close and ends the socket
 * (destroyed LINGER_MS later if the client keeps its side open). A socket that is not writable,
 * or that had bytes written after `writtenBefore` (an answer already under way), is destroyed.
 */
export function writeRaw(sock: Duplex, reply: Reply, writtenBefore?: number): void {
  const written = (sock as Duplex & { bytesWritten?: number }).bytesWritten ?? 0;
  if (!sock.writable || (writtenBefore !== undefined && written > writtenBefore)) return void sock.destroy();
  const headers: Record<string, string | string[]> = { connection: 'close', ...(reply.headers ?? {}) };
  let body: Buffer | string = '';
  if (typeof reply.body === 'string' || Buffer.isBuffer(reply.body)) body = reply.body;
  else if (reply.body !== undefined && reply.body !== null) {
    body = JSON.stringify(reply.body);
    headers['content-type'] ??= 'application/json; charset=utf-8';
  }
  headers['content-length'] = String(Buffer.byteLength(body));
  let head = `HTTP/1.1 ${reply.status} ${STATUS_CODES[reply.status] ?? 'Error'}\r\n`;
  for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) head += `${k}: ${one}\r\n`;
  sock.end(Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), Buffer.isBuffer(body) ? body : Buffer.from(body)]));
  const t = setTimeout(() => sock.destroy(), LINGER_MS);
  t.unref();
  sock.once('close', () => clearTimeout(t));
}
