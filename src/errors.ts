// AppError: the one error type the daemon raises on purpose. It carries a closed `kind`
// (what went wrong, for mapping to a transport) and a stable `code` (what clients match on).
// Nothing here knows about HTTP; src/http/errors.ts maps kinds to statuses in one place.

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
