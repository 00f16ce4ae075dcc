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
