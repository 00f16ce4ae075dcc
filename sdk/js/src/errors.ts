// The one error the SDK throws for an answer of the API that is not a success: the API's stable
// `error` code, its `detail`, the HTTP status, `retry_after` (seconds) when waiting helps and the
// request id of a server-side failure. A 402 is a PaymentRequiredError (a RootboxError too) with
// where to add credit.

export class RootboxError extends Error {
  /** The API's stable code (`invalid_api_key`, `server_not_found`, `free_tier_exceeded` …);
   *  `connection_failed` when no answer came. */
  readonly code: string;
  readonly detail: string;
  /** HTTP status; 0 when no answer came. */
  readonly status: number;
  /** Seconds until a retry may succeed (the answer's retry_after, or its Retry-After header). */
  readonly retryAfter?: number;
  readonly requestId?: string;
  /** The answer's whole JSON body. */
  readonly body: Record<string, unknown>;

  constructor(o: { status: number; code: string; detail: string; retryAfter?: number; requestId?: string; body?: Record<string, unknown>; cause?: unknown }) {
    super(`${o.code}: ${o.detail}`, o.cause === undefined ? undefined : { cause: o.cause });
    this.name = 'RootboxError';
    this.code = o.code;
    this.detail = o.detail;
    this.status = o.status;
    this.retryAfter = o.retryAfter;
    this.requestId = o.requestId;
    this.body = o.body ?? {};
  }
}

/** 402: the account's free grant is used up without credit (`free_tier_exceeded`, the upgrade
 *  envelope), the server is suspended, or a recharge needs its x402 payment (`payment_required`). */
export class PaymentRequiredError extends RootboxError {
  /** Where to add credit: the envelope's upgrade_url, or the recharge endpoint of an x402 answer. */
  readonly rechargeUrl?: string;
  /** The x402 terms (`accepts`) of a recharge answered 402. */
  readonly accepts?: unknown[];

  constructor(o: ConstructorParameters<typeof RootboxError>[0]) {
    super(o);
    this.name = 'PaymentRequiredError';
    const b = this.body;
    const resource = b.resource as { url?: unknown } | undefined;
    const url = typeof b.upgrade_url === 'string' ? b.upgrade_url : typeof resource?.url === 'string' ? resource.url : undefined;
    this.rechargeUrl = url;
    this.accepts = Array.isArray(b.accepts) ? b.accepts : undefined;
  }
}

/** The error for a non-2xx answer whose body was read (JSON when it is). */
export function errorOf(status: number, text: string, headers: Record<string, string | string[] | undefined>): RootboxError {
  let body: Record<string, unknown> = {};
  try {
    const j: unknown = JSON.parse(text);
    if (j && typeof j === 'object' && !Array.isArray(j)) body = j as Record<string, unknown>;
  } catch {
    // not JSON: a proxy's page, say
  }
  const header = Number(headers['retry-after']);
  const retryAfter = typeof body.retry_after === 'number' ? body.retry_after : Number.isFinite(header) && header >= 0 ? header : undefined;
  const rid = headers['x-request-id'];
  const o = {
    status,
    code: typeof body.error === 'string' ? body.error : `http_${status}`,
    detail: typeof body.detail === 'string' ? body.detail : text.slice(0, 200) || `HTTP ${status}`,
    retryAfter,
    requestId: typeof body.request_id === 'string' ? body.request_id : typeof rid === 'string' ? rid : undefined,
    body,
  };
  return status === 402 ? new PaymentRequiredError(o) : new RootboxError(o);
}
