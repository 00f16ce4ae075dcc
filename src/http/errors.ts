// The one place where errors become HTTP: AppError kind → status, body {error, detail}. The
// router, the edge, the proxy's pages and every answer written straight onto a socket (raw: a
// refused connection, an upgrade) build their answer here, so one code has one status and one
// body shape wherever it is said. Anything that is not an AppError (an InternalError: a failed
// host command, a path; or a bug) is a 500 with a generic sentence and the request id; its
// message, fields and stack are logged, never sent. Every 5xx body carries the request id when
// there is one; an answer with a retry time has Retry-After and `retry_after`.

import type { Duplex } from 'node:stream';
import { AppError, errorFields, genericDetail, type ErrorCode, type ErrorKind } from '../errors.js';
import type { Logger } from '../log/index.js';
import { writeRaw } from './reply.js';
import type { Reply } from './types.js';

const STATUS: Record<ErrorKind, number> = {
  redirect: 308,
  bad_request: 400,
  unauthorized: 401,
  payment_required: 402,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  conflict: 409,
  too_large: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  expectation_failed: 417,
  misdirected: 421,
  rate_limited: 429,
  header_too_large: 431,
  internal: 500,
  not_implemented: 501,
  upstream: 502,
  unavailable: 503,
  timeout: 504,
  version_not_supported: 505,
  insufficient_storage: 507,
};

export const statusOf = (kind: ErrorKind): number => STATUS[kind];

/** The answer to an AppError, for any transport: status, headers, {…extra, error, detail}. */
export function appErrorReply(err: AppError, requestId?: string): Reply {
  const status = STATUS[err.kind];
  const headers: Record<string, string> = { ...(err.headers ?? {}) };
  // a Retry-After given as a header (in seconds) counts as the retry time too
  const after = err.retryAfter ?? (/^\d{1,9}$/.test(headers['retry-after'] ?? '') ? Number(headers['retry-after']) : undefined);
  const retry = after === undefined ? {} : { retry_after: after };
  if (after !== undefined) headers['retry-after'] = String(after);
  return {
    status,
    headers,
    body: { ...(err.extra ?? {}), error: err.code, detail: err.detail, ...retry, ...(status >= 500 && requestId ? { request_id: requestId } : {}) },
  };
}

/** The answer to whatever a handler threw; a 5xx is logged, anything not an AppError in full. */
export function errorReply(err: unknown, requestId: string, log: Logger): Reply {
  if (err instanceof AppError) {
    if (STATUS[err.kind] >= 500) {
      const fields = { rid: requestId, error: err.code, detail: err.detail };
      if (err.cause === undefined) log.warn('request failed', fields);
      else log.error('request failed', { ...fields, cause: errorFields(err.cause) });
    }
    return appErrorReply(err, requestId);
  }
  // anything else (an InternalError such as a failed host command, a bug) is told only in the log
  log.error('unexpected error', { rid: requestId, err: errorFields(err) });
  return {
    status: 500,
    body: { error: 'internal' satisfies ErrorCode, detail: genericDetail(requestId), request_id: requestId },
  };
}

/** Options of a raw answer. */
export interface RawErrorOptions {
  /** Names the answer (x-request-id, and request_id on a 5xx). */
  requestId?: string;
  /** The socket's bytesWritten when it was handed over: anything written since (an answer under
   *  way) means the socket is closed instead of answered. */
  writtenBefore?: number;
}

/** Answers an AppError straight onto a socket as HTTP/1.1, then closes it: the same status,
 *  headers and body the router would give. */
export function rawError(sock: Duplex, err: AppError, o: RawErrorOptions = {}): void {
  const reply = appErrorReply(err, o.requestId);
  if (o.requestId) reply.headers = { ...reply.headers, 'x-request-id': o.requestId };
  writeRaw(sock, reply, o.writtenBefore);
}

/** What node's HTTP/1.1 parser refused (its `err.code`, the bytes it read), as an AppError;
 *  undefined for a broken connection, which gets no answer. */
export function parserError(code: string | undefined, head?: Buffer): AppError | undefined {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return AppError.of('header_too_large', 'the request head (request line and headers) is larger than this server accepts (16 KiB)');
    case 'HPE_INVALID_METHOD': // a token that is no method node knows is 501; anything else is no HTTP at all
      return /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ /.test(head?.subarray(0, 64).toString('latin1') ?? '')
        ? AppError.of('unknown_method', 'the request method is not one this server implements')
        : AppError.of('bad_request', 'the request is not valid HTTP/1.1');
    case 'HPE_INVALID_VERSION':
    case 'HPE_PAUSED_H2_UPGRADE':
      return AppError.of('version_not_supported', 'this port speaks HTTP/1.1; HTTP/2 is served over TLS');
    case 'HPE_INVALID_URL':
      return AppError.of('invalid_target', 'the request target is not a valid path or URL');
    case 'HPE_INVALID_HEADER_TOKEN':
    case 'HPE_CR_EXPECTED':
    case 'HPE_LF_EXPECTED':
      return AppError.of('invalid_header', 'a request header line is malformed or has characters headers may not contain');
    case 'HPE_INVALID_CONTENT_LENGTH':
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
    case 'HPE_INVALID_TRANSFER_ENCODING':
    case 'HPE_INVALID_CHUNK_SIZE':
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return AppError.of('invalid_framing', 'the body framing (Content-Length, Transfer-Encoding or chunk sizes) is invalid or ambiguous');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return AppError.of('request_timeout', 'the request did not arrive in time');
    default:
      return code?.startsWith('HPE_') ? AppError.of('bad_request', 'the request is not valid HTTP/1.1') : undefined;
  }
}
