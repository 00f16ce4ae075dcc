// The one place where errors become HTTP: AppError kind → status, body {error, detail}.
// Anything that is not an AppError is a 500 with the request id; its stack is logged, never sent.

import { AppError, type ErrorKind } from '../errors.js';
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
    if (status >= 500) log.warn('request failed', { code: err.code, detail: err.detail, cause: err.cause });
    return {
      status,
      headers: { ...(err.headers ?? {}) },
      body: { ...(err.extra ?? {}), error: err.code, detail: err.detail },
    };
  }
  log.error('unexpected error', { err });
  return {
    status: 500,
    body: { error: 'internal', detail: `unexpected error; quote request id ${requestId} when reporting it`, request_id: requestId },
  };
}
