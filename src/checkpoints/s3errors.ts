// What an S3 client's failure means to the checkpoints: a missing key (null / false), a store that
// cannot be reached or will not work for now (StoreUnavailableError: no answer, a timeout, a 5xx,
// throttling, an answer the client could not read), or the host's own failure (InternalError:
// refused credentials, a missing bucket, any other 4xx — retrying will not help). The error kept
// as cause is a summary (operation, status, error name, message): never the SDK's objects, which
// carry the request.

import { InternalError } from '../errors.js';
import { StoreUnavailableError } from './blobs.js';

interface SdkError {
  name?: string;
  code?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number };
  $retryable?: { throttling?: boolean };
}

/** Error names S3 and its clones answer when they are busy, slow or failing for now. */
const TRANSIENT = new Set([
  'SlowDown',
  'Throttling',
  'ThrottlingException',
  'TooManyRequests',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'RequestThrottled',
  'ServiceUnavailable',
  'InternalError',
  'RequestTimeout',
  'RequestTimeoutException',
  'TimeoutError',
  'AbortError',
]);

const status = (e: SdkError): number | undefined => e?.$metadata?.httpStatusCode;

/** A 404 for the object (NoSuchKey, or a HEAD's bodiless NotFound); never a missing bucket. */
export function isMissingKey(e: unknown): boolean {
  const err = e as SdkError;
  if (err?.name === 'NoSuchBucket') return false;
  return err?.name === 'NoSuchKey' || err?.name === 'NotFound' || status(err) === 404;
}

function summary(e: unknown, what: string): Error {
  const err = e as SdkError;
  const parts = [what, status(err) === undefined ? 'no answer' : `HTTP ${status(err)}`, err?.name ?? 'Error'];
  if (err?.code && err.code !== err.name) parts.push(err.code);
  const out = new Error(`${parts.join(' ')}: ${String(err?.message ?? e).slice(0, 300)}`);
  out.name = err?.name ?? 'Error';
  return out;
}

/** Whether the failure is the store's, for now: the operation may succeed when retried. */
export function isTransient(e: unknown, timedOut = false): boolean {
  const err = e as SdkError;
  const code = status(err);
  if (timedOut || TRANSIENT.has(err?.name ?? '') || err?.$retryable?.throttling) return true;
  if (code === undefined) return true; // no HTTP answer at all: refused, reset, closed, timed out
  if (code >= 500 || code === 429 || code === 408) return true;
  return code >= 200 && code < 300; // an answer it could not read (not S3, cut short)
}

/** The error to throw for a failed operation `what` (e.g. "PUT chunks/ab/abcd") on `where`. */
export function storeError(e: unknown, what: string, where: string, timedOut = false): Error {
  const cause = summary(e, what);
  if (isTransient(e, timedOut)) {
    const err = e as SdkError;
    const why =
      timedOut || err?.name === 'TimeoutError' || err?.name === 'AbortError'
        ? 'timed out'
        : status(err) === undefined
          ? `no answer: ${err?.code ?? err?.name ?? 'error'}`
          : `HTTP ${status(err)} ${err?.name ?? ''}`.trim();
    return new StoreUnavailableError(`the checkpoint store ${where} is unavailable (${what}: ${why})`, { cause });
  }
  return new InternalError(`the checkpoint store ${where} refused ${what}`, { store: where, status: status(e as SdkError) }, { cause });
}
