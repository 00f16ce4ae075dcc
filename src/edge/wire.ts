// Answers the edge gives on a connection's own terms rather than through an app: what node's
// HTTP/1.1 parser refused, a CONNECT, an Expect other than 100-continue, and — with no request
// object at all — a refused connection or a head that never completed. Each is an HTTP/1.1
// {error, detail} answer with Connection: close, built by src/http/errors.ts like every other.

import type { Server as HttpServer, IncomingMessage, ServerResponse } from 'node:http';
import type { Http2SecureServer, Http2Server } from 'node:http2';
import type { Duplex } from 'node:stream';
import { AppError } from '../errors.js';
import { appErrorReply, parserError, rawError, sendReply, type Req, type Res } from '../http/index.js';
import type { Logger } from '../log/index.js';

/** What the edge knows of a connection: HTTP/1.1 requests under way, the latest one's answer. */
export type ConnLookup = (socket: Duplex) => { inflight: number; res?: ServerResponse } | undefined;

export function answerRefusals(srv: HttpServer | Http2SecureServer | Http2Server, log: Logger, connOf: ConnLookup): void {
  // between requests the answer goes on the socket; inside a request's body, as that request's
  // answer when it has not begun; otherwise (an answer is under way) the connection is closed
  srv.on('clientError', (err: Error & { code?: string; rawPacket?: Buffer }, socket: Duplex) => {
    log.debug('client error', { error_code: err.code, err: err.message });
    const refusal = parserError(err.code, err.rawPacket);
    const conn = connOf(socket);
    if (!refusal) return void socket.destroy();
    if (!conn?.inflight) return rawError(socket, refusal);
    const res = conn.res;
    if (conn.inflight > 1 || !res || res.headersSent) return void socket.destroy();
    res.shouldKeepAlive = false;
    sendReply(res, appErrorReply(refusal));
  });
  srv.on('connect', (_req: IncomingMessage, socket: Duplex) =>
    rawError(socket, AppError.of('method_not_allowed', 'CONNECT is not supported: this host is not a forward proxy')),
  );
  srv.on('checkExpectation', (req: Req, res: Res) => {
    if ('shouldKeepAlive' in res) res.shouldKeepAlive = false;
    const detail = `only "Expect: 100-continue" is supported, not "${String(req.headers.expect).slice(0, 60)}"`;
    sendReply(res, appErrorReply(AppError.of('expectation_failed', detail)));
  });
}
