// Failed SSH logins per source IP in a fixed window. When an address reaches the limit it is
// "blocked" until the window ends: its attempts that cannot be a valid key login end their
// connection at once (a valid key still logs in, see auth.ts). Memory is bounded:
// expired entries are swept, and past `maxTracked` addresses the oldest entries are evicted.

export interface AuthLimiterOptions {
  /** Failures allowed per address per window. */
  maxFailures: number;
  windowMs: number;
  maxTracked?: number;
  now?: () => number;
}

interface Entry {
  failures: number;
  resetAt: number;
}

/** `::ffff:1.2.3.4` and `1.2.3.4` are one client. */
export function normalizeIp(ip: string | undefined): string {
  if (!ip) return 'unknown';
  return ip.startsWith('::ffff:') && ip.includes('.') ? ip.slice(7) : ip;
}

export class AuthLimiter {
  private readonly entries = new Map<string, Entry>();
  private readonly now: () => number;
  private readonly maxTracked: number;

  constructor(private readonly opts: AuthLimiterOptions) {
    this.now = opts.now ?? Date.now;
    this.maxTracked = opts.maxTracked ?? 100_000;
  }

  private live(ip: string): Entry | undefined {
    const e = this.entries.get(ip);
    if (e && e.resetAt <= this.now()) {
      this.entries.delete(ip);
      return undefined;
    }
    return e;
  }

  /** True while `ip` has used up its failures for the current window. */
  blocked(ip: string): boolean {
    const e = this.live(ip);
    return e !== undefined && e.failures >= this.opts.maxFailures;
  }

  /** Milliseconds until `ip` may try again (0 when not blocked). */
  retryAfter(ip: string): number {
    const e = this.live(ip);
    return e && e.failures >= this.opts.maxFailures ? Math.max(0, e.resetAt - this.now()) : 0;
  }

  /** Records one failed attempt; returns true when the address is now blocked. */
  fail(ip: string): boolean {
    let e = this.live(ip);
    if (!e) {
      if (this.entries.size >= this.maxTracked) this.sweep();
      e = { failures: 0, resetAt: this.now() + this.opts.windowMs };
      this.entries.set(ip, e);
    }
    e.failures += 1;
    return e.failures >= this.opts.maxFailures;
  }

  /** Drops expired entries; if still over the cap, drops the oldest (Map keeps insertion order). */
  sweep(): void {
    const t = this.now();
    for (const [ip, e] of this.entries) if (e.resetAt <= t) this.entries.delete(ip);
    for (const ip of this.entries.keys()) {
      if (this.entries.size < this.maxTracked) break;
      this.entries.delete(ip);
    }
  }

  get size(): number {
    return this.entries.size;
  }
}
