// Token-bucket rate limiting keyed by a string (an IP, an api key, a phone number). In memory:
// limits protect this process, and a restart forgiving everyone is acceptable. Buckets that are
// full again are dropped so the map does not grow without bound. Also the one way a 429 is built
// (tooMany): every limit — API requests, feedback, SMS, wrong codes, the edge's connection cap —
// answers "<what>; retry in N s" with Retry-After and `retry_after` N.

import { AppError, type CodeOf } from './errors.js';

export interface RateLimit {
  /** Burst size: how many events may happen at once. */
  burst: number;
  /** Sustained rate: events per second refilled. */
  perSecond: number;
}

export interface Verdict {
  ok: boolean;
  /** Seconds until one more event would be allowed (0 when ok). */
  retryAfter: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private lastSweep = 0;

  constructor(
    private readonly limit: RateLimit,
    private readonly now: () => number = Date.now,
  ) {}

  take(key: string, cost = 1): Verdict {
    const t = this.now();
    this.sweep(t);
    const b = this.buckets.get(key) ?? { tokens: this.limit.burst, at: t };
    b.tokens = Math.min(this.limit.burst, b.tokens + ((t - b.at) / 1000) * this.limit.perSecond);
    b.at = t;
    if (b.tokens >= cost) {
      b.tokens -= cost;
      this.buckets.set(key, b);
      return { ok: true, retryAfter: 0 };
    }
    this.buckets.set(key, b);
    return { ok: false, retryAfter: Math.max(1, Math.ceil((cost - b.tokens) / this.limit.perSecond)) };
  }

  private sweep(t: number): void {
    if (t - this.lastSweep < 60_000) return;
    this.lastSweep = t;
    const full = (this.limit.burst / this.limit.perSecond) * 1000;
    for (const [k, b] of this.buckets) if (t - b.at > full) this.buckets.delete(k);
  }
}

/** The 429 of a limit: `<what>; retry in N s`, with Retry-After and `retry_after` of N (at least 1). */
export function tooMany(code: CodeOf<'rate_limited'>, what: string, retryAfterSeconds: number): AppError {
  const s = Math.max(1, Math.ceil(retryAfterSeconds));
  return AppError.of(code, `${what}; retry in ${s} s`, { kind: 'rate_limited', retryAfter: s });
}
