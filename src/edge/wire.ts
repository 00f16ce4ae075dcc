// Answers the edge gives on a connection's own terms rather than through an app: what node's
// HTTP/1.1 parser refused, a CONNECT, an Expect other than 100-continue, and — with no request
// object at all — a refused connection or a head that never completed. Each is an HTTP/1.1
// {error, detail} answer with Connection: close (the status from src/http/errors.ts).

import { STATUS_CODES, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { Http2SecureServer } from 'node:http2';
import type { Duplex } from 'node:stream';
import { parserErrorReply, sendReply, type Req, type Res } from '../http/index.js';
import type { Logger } from '../log/index.js';

/** How long a closing socket waits for the client to take the answer and close its side. */
const LINGER_MS = 1000;

/** Writes an answer straight onto the socket and closes it. */
export function rawAnswer(sock: Duplex, status: number, error: string, detail: string, headers: Record<string, string> = {}): void {
  if (!sock.writable) return void sock.destroy();
  const body = JSON.stringify({ error, detail });
  let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\nconnection: close\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  sock.end(`${head}\r\n${body}`);
  const t = setTimeout(() => sock.destroy(), LINGER_MS);
  t.unref();
  sock.once('close', () => clearTimeout(t));
}

/** What the edge knows of a connection: HTTP/1.1 requests under way, the latest one's answer. */
export type ConnLookup = (socket: Duplex) => { inflight: number; res?: ServerResponse } | undefined;

export function answerRefusals(srv: HttpServer | Http2SecureServer, log: Logger, connOf: ConnLookup): void {
  // between requests the answer goes on the socket; inside a request's body, as that request's
  // answer when it has not begun; otherwise (an answer is under way) the connection is closed
  srv.on('clientError', (err: Error & { code?: string; rawPacket?: Buffer }, socket: Duplex) => {
    log.debug('client error', { error_code: err.code, err: err.message });
    const reply = parserErrorReply(err.code, err.rawPacket);
    const conn = connOf(socket);
    if (!reply) return void socket.destroy();
    if (!conn?.inflight) return rawAnswer(socket, reply.status, reply.error, reply.detail);
    const res = conn.res;
    if (conn.inflight > 1 || !res || res.headersSent) return void socket.destroy();
    res.shouldKeepAlive = false;
    sendReply(res, { status: reply.status, body: { error: reply.error, detail: reply.detail } });
  });
  srv.on('connect', (_req: IncomingMessage, socket: Duplex) =>
    rawAnswer(socket, 405, 'method_not_allowed', 'CONNECT is not supported: this host is not a forward proxy'),
  );
  srv.on('checkExpectation', (req: Req, res: Res) => {
    if ('shouldKeepAlive' in res) res.shouldKeepAlive = false;
    const detail = `only "Expect: 100-continue" is supported, not "${String(req.headers.expect).slice(0, 60)}"`;
    sendReply(res, { status: 417, body: { error: 'expectation_failed', detail } });
  });
}
