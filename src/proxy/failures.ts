// What a forward that got no usable answer from an app becomes: the kind of failure (the caller
// may mark the app down) and the AppError the visitor sees (502 bad_gateway or app_down, 504
// upstream_timeout). Shared by the full path (exchange.ts) and the lane (direct.ts), which both
// report it through reportFailure. The detail names what the app did wrong in our own words or a
// socket's error code, never another error's message, which may say anything about the host (it
// is logged instead). Also what a request the pool queued nothing for is answered (refusal).

import { AppError, errorFields } from '../errors.js';
import type { Logger } from '../log/index.js';
import { UpstreamProtocolError } from '../h1/index.js';
import { tooMany } from '../ratelimit.js';
import type { Refusal } from './pool.js';

/** Why a forward failed before anything reached the client. */
export type ForwardFailure = 'refused' | 'timeout' | 'bad_response' | 'error';

export const codeOf = (e: Error): string | undefined => (e as { code?: string }).code;
/** An error code that may be named in a 502's detail (ECONNRESET, EPIPE, ERR_STREAM_…). */
const PUBLIC_CODE = /^[A-Z][A-Z0-9_]{1,39}$/;

/** `timedOut`: the app took the request and then went quiet past the upstream timeout. */
function classify(err: Error, timedOut: boolean): [ForwardFailure, AppError] {
  const code = codeOf(err);
  if (code === 'ECONNREFUSED') {
    return [
      'refused',
      AppError.of('app_down', 'the app of this server is not accepting connections on port 80', {
        extra: { hint: 'Its /root/run.sh may have crashed or be restarting; see /var/log/run.sh.log on the server.' },
      }),
    ];
  }
  if (timedOut || code === 'ETIMEDOUT' || code === 'EHOSTUNREACH') {
    const detail = timedOut ? 'the app of this server did not answer in time' : 'the app of this server did not accept the connection in time';
    return [
      'timeout',
      AppError.of('upstream_timeout', detail, { extra: { hint: 'Check that the server started by /root/run.sh answers requests on 0.0.0.0:80.' } }),
    ];
  }
  const why = err instanceof UpstreamProtocolError ? err.message : code && PUBLIC_CODE.test(code) ? code : 'connection error';
  return [
    err instanceof UpstreamProtocolError ? 'bad_response' : 'error',
    AppError.of('bad_gateway', `the app of this server broke the connection or sent an invalid response (${why.slice(0, 80)})`, {
      extra: { hint: 'See /var/log/run.sh.log on the server.' },
    }),
  ];
}

/**
 * The app went away before it answered: it refused the connection (it is being restarted or
 * replaced, the port is briefly closed) or closed or reset it before sending a byte. A request
 * that can be sent again then waits for the app (proxy.appStartGrace) instead of failing.
 */
export function appWentAway(err: Error, answered: boolean): boolean {
  const code = codeOf(err);
  if (code === 'ECONNREFUSED') return true;
  return !answered && (code === 'ECONNRESET' || code === 'EPIPE' || code === 'BAD_RESPONSE');
}

/** Who is told of a failed forward: the caller (onFailure, to mark the app down) and the log. */
export interface FailureReport {
  serverId: string;
  requestId: string;
  log: Logger;
  onFailure?: (serverId: string, f: ForwardFailure) => void;
}

/** Classifies a failed forward, tells the caller and logs it (a warning only for an error without a code); returns what the visitor is answered. */
export function reportFailure(err: Error, timedOut: boolean, r: FailureReport): AppError {
  const [kind, failure] = classify(err, timedOut);
  r.onFailure?.(r.serverId, kind);
  const code = codeOf(err);
  if (kind === 'error' && !code) r.log.warn('forward failed', { rid: r.requestId, err: errorFields(err) });
  else r.log.debug('forward failed', { rid: r.requestId, error_code: code, err: err.message });
  return failure;
}

/** The answer to a request the pool queued nothing for, or bumped from its queue (pool.ts). */
export function refusal(why: Refusal): AppError {
  if (why === 'share')
    return tooMany('too_many_app_requests', "this address holds its share of the connections to this server's app and as many of its requests wait", 1);
  return AppError.of('app_busy', "too many requests wait for this server's app; retry shortly", { retryAfter: 1 });
}
