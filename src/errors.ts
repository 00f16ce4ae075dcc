// The two kinds of error. AppError: the one error type the daemon raises on purpose for clients;
// a closed `kind` (what went wrong, for mapping to a transport) and a stable `code` (what clients
// match on). InternalError: a failure of the host itself (a command's exit status and stderr, a
// path, a syscall), logged in full and never shown: a client only ever gets a generic sentence with
// the request id. Nothing here knows about HTTP; src/http/errors.ts maps kinds to statuses in one
// place.

export type ErrorKind =
  | 'bad_request'
  | 'unauthorized'
  | 'payment_required'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'too_large'
  | 'unsupported_media_type'
  | 'misdirected'
  | 'rate_limited'
  | 'upstream'
  | 'timeout'
  | 'unavailable'
  | 'internal';

export interface AppErrorOptions {
  cause?: unknown;
  /** Extra fields merged into the error body (e.g. payment terms, retry hints). */
  extra?: Record<string, unknown>;
  /** Extra response headers (e.g. Retry-After, PAYMENT-REQUIRED). */
  headers?: Record<string, string>;
}

export class AppError extends Error {
  readonly kind: ErrorKind;
  readonly code: string;
  readonly extra?: Record<string, unknown>;
  readonly headers?: Record<string, string>;

  constructor(kind: ErrorKind, code: string, detail: string, opts: AppErrorOptions = {}) {
    super(detail, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    this.kind = kind;
    this.code = code;
    this.extra = opts.extra;
    this.headers = opts.headers;
  }

  get detail(): string {
    return this.message;
  }
}

export const isAppError = (e: unknown): e is AppError => e instanceof AppError;

/** Shorthands for the common kinds; the code stays explicit at every call site. */
export const badRequest = (code: string, detail: string, opts?: AppErrorOptions) =>
  new AppError('bad_request', code, detail, opts);
export const notFound = (code: string, detail: string, opts?: AppErrorOptions) =>
  new AppError('not_found', code, detail, opts);
export const conflict = (code: string, detail: string, opts?: AppErrorOptions) =>
  new AppError('conflict', code, detail, opts);
export const forbidden = (code: string, detail: string, opts?: AppErrorOptions) =>
  new AppError('forbidden', code, detail, opts);
export const unavailable = (code: string, detail: string, opts?: AppErrorOptions) =>
  new AppError('unavailable', code, detail, opts);
export const internal = (code: string, detail: string, opts?: AppErrorOptions) =>
  new AppError('internal', code, detail, opts);

/**
 * A failure inside the host that a client must not see (tool output, host paths). It is never an
 * AppError, so every transport answers it with a generic sentence; `fields` go to the log.
 */
export class InternalError extends Error {
  readonly fields: Record<string, unknown>;

  constructor(message: string, fields: Record<string, unknown> = {}, opts: { cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'InternalError';
    this.fields = fields;
  }
}

/** The sentence a client gets for an error that is not an AppError. */
export const genericDetail = (requestId?: string): string =>
  requestId ? `an internal error occurred; quote request id ${requestId} when reporting it` : 'an internal error occurred on this host; try again later';

/** What may be said to a client about `e`: an AppError's detail, otherwise the generic sentence. */
export const publicDetail = (e: unknown, requestId?: string): string => (e instanceof AppError ? e.detail : genericDetail(requestId));

/** Everything worth logging about `e`: name, message, stack, an InternalError's fields, causes. */
export function errorFields(e: unknown, depth = 0): unknown {
  if (!(e instanceof Error)) return e;
  const out: Record<string, unknown> = { name: e.name, message: e.message, stack: e.stack };
  const code = (e as { code?: unknown }).code;
  if (code !== undefined) out.error_code = code; // a field named `code` is redacted by the logger
  if (e instanceof InternalError) Object.assign(out, e.fields);
  if (e.cause !== undefined && depth < 4) out.cause = errorFields(e.cause, depth + 1);
  return out;
}
