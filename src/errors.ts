// The two kinds of error. AppError: the one error type the daemon raises on purpose for clients;
// a stable `code` from the catalogue (src/catalogue.ts: what clients match on) and the `kind` the
// catalogue gives it (what went wrong, for mapping to a transport). AppError.of(code, detail)
// builds one; an unknown code does not compile. InternalError: a failure of the host itself (a
// command's exit status and stderr, a path, a syscall), logged in full and never shown: a client
// only ever gets a generic sentence with the request id. Nothing here knows about HTTP;
// src/http/errors.ts maps kinds to statuses in one place.

import { CATALOGUE, kindAllowed, type ErrorCode, type ErrorKind, type KindsOf } from './catalogue.js';

export { CATALOGUE, isErrorCode, type CodeOf, type ErrorCode, type ErrorKind } from './catalogue.js';

export interface AppErrorOptions {
  cause?: unknown;
  /** Extra fields merged into the error body (e.g. payment terms, hints). */
  extra?: Record<string, unknown>;
  /** Extra response headers (e.g. PAYMENT-REQUIRED, Allow). */
  headers?: Record<string, string>;
  /** Seconds after which a retry may succeed (also set as the retry-after header; answered as
   *  Retry-After and `retry_after`). */
  retryAfter?: number;
}

/** Options of AppError.of: a code with `also` kinds may name one of them. */
export type OfOptions<C extends ErrorCode> = AppErrorOptions & { kind?: KindsOf<C> };

/** The long form's arguments, kind first: the kind must be one the catalogue gives the code. */
type LongForm = { [C in ErrorCode]: [kind: KindsOf<C>, code: C, detail: string, opts?: AppErrorOptions] }[ErrorCode];

export class AppError extends Error {
  readonly kind: ErrorKind;
  readonly code: ErrorCode;
  readonly extra?: Record<string, unknown>;
  readonly headers?: Record<string, string>;
  readonly retryAfter?: number;

  /** The error of a catalogue code, with the kind the catalogue gives it (or opts.kind). */
  static of<C extends ErrorCode>(code: C, detail: string, opts: OfOptions<C> = {}): AppError {
    return new AppError(...([opts.kind ?? CATALOGUE[code].kind, code, detail, opts] as LongForm));
  }

  /** Prefer AppError.of; this long form names the kind too (checked against the catalogue). */
  constructor(...[kind, code, detail, opts = {}]: LongForm) {
    super(detail, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    // the types keep kind and code together; a code that slipped past them keeps its catalogue kind
    this.kind = kindAllowed(code, kind) ? kind : (CATALOGUE[code]?.kind ?? kind);
    this.code = code;
    this.extra = opts.extra;
    this.headers = opts.headers;
    if (opts.retryAfter !== undefined) {
      this.retryAfter = Math.max(1, Math.ceil(opts.retryAfter));
      this.headers = { ...opts.headers, 'retry-after': String(this.retryAfter) };
    }
  }

  get detail(): string {
    return this.message;
  }
}

export const isAppError = (e: unknown): e is AppError => e instanceof AppError;

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
