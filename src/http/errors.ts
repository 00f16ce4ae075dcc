// The one place where errors become HTTP: AppError kind → status, body {error, detail}.
// Anything that is not an AppError (an InternalError: a failed host command, a path; or a bug) is
// a 500 with a generic sentence and the request id; its message, fields and stack are logged,
// never sent. Every 5xx body carries the request id.

import { AppError, errorFields, genericDetail, type ErrorKind } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Reply } from './types.js';

const STATUS: Record<ErrorKind, number> = {
  bad_request: 400,
  unauthorized: 401,
  payment_required: 402,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  too_large: 413,
  unsupported_media_type: 415,
  misdirected: 421,
  rate_limited: 429,
  internal: 500,
  upstream: 502,
  unavailable: 503,
  timeout: 504,
};

export const statusOf = (kind: ErrorKind): number => STATUS[kind];

export function errorReply(err: unknown, requestId: string, log: Logger): Reply {
  if (err instanceof AppError) {
    const status = STATUS[err.kind];
    if (status >= 500) {
      const fields = { rid: requestId, error: err.code, detail: err.detail };
      if (err.cause === undefined) log.warn('request failed', fields);
      else log.error('request failed', { ...fields, cause: errorFields(err.cause) });
    }
    return {
      status,
      headers: { ...(err.headers ?? {}) },
      body: { ...(err.extra ?? {}), error: err.code, detail: err.detail, ...(status >= 500 ? { request_id: requestId } : {}) },
    };
  }
  // anything else (an InternalError such as a failed host command, a bug) is told only in the log
  log.error('unexpected error', { rid: requestId, err: errorFields(err) });
  return {
    status: 500,
    body: { error: 'internal', detail: genericDetail(requestId), request_id: requestId },
  };
}

/** The parts of an answer to what node's HTTP/1.1 parser refused (its `err.code`, the bytes it
 *  read); undefined for a broken connection, which gets no answer. */
export function parserErrorReply(code: string | undefined, head?: Buffer): { status: number; error: string; detail: string } | undefined {
  const e = (status: number, error: string, detail: string) => ({ status, error, detail });
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return e(431, 'header_too_large', 'the request head (request line and headers) is larger than this server accepts (16 KiB)');
    case 'HPE_INVALID_METHOD': // a token that is no method node knows is 501; anything else is no HTTP at all
      return /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ /.test(head?.subarray(0, 64).toString('latin1') ?? '')
        ? e(501, 'unknown_method', 'the request method is not one this server implements')
        : e(400, 'bad_request', 'the request is not valid HTTP/1.1');
    case 'HPE_INVALID_VERSION':
    case 'HPE_PAUSED_H2_UPGRADE':
      return e(505, 'version_not_supported', 'this port speaks HTTP/1.1; HTTP/2 is served over TLS');
    case 'HPE_INVALID_URL':
      return e(400, 'invalid_target', 'the request target is not a valid path or URL');
    case 'HPE_INVALID_HEADER_TOKEN':
    case 'HPE_CR_EXPECTED':
    case 'HPE_LF_EXPECTED':
      return e(400, 'invalid_header', 'a request header line is malformed or has characters headers may not contain');
    case 'HPE_INVALID_CONTENT_LENGTH':
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
    case 'HPE_INVALID_TRANSFER_ENCODING':
    case 'HPE_INVALID_CHUNK_SIZE':
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return e(400, 'invalid_framing', 'the body framing (Content-Length, Transfer-Encoding or chunk sizes) is invalid or ambiguous');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return e(408, 'request_timeout', 'the request did not arrive in time');
    default:
      return code?.startsWith('HPE_') ? e(400, 'bad_request', 'the request is not valid HTTP/1.1') : undefined;
  }
}
