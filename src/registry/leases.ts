// How this host judges the other hosts' leases through registry trouble (issue 35 item 6). A lease
// lapses when its host wrote no heartbeat for a lease — or when nobody could: while the registry
// cannot be reached every lease runs out together, and the first rows read once it is back show
// every other host lapsed until its next heartbeat. So a lease that ran out after the last time
// this host reached the registry without trouble is excused while the trouble lasts and for one
// lease after it ended (every host has that long to renew); one that ran out before the trouble
// is not. Two signals each keep a `Trouble`: the placement cache's reads of the hosts (failed, or
// late: a read hanging on a cut connection) and this host's own heartbeat (failed: the registry
// does not take this host's writes, and likely nobody's). Only the lease is judged here; whether a
// host is down for forwarding (lease lapsed and its channel not answering) is the cache's.

export interface TroubleOptions {
  /** How long after the trouble ended a lease that ran out during it is still excused (a lease). */
  graceMs: number;
  /** Monotonic milliseconds. */
  now: () => number;
  /** With no good answer for this long, trouble is under way though nothing failed yet (the
   *  signal is periodic: a read is late). Absent: only a failure tells. */
  lateMs?: number;
}

export class Trouble {
  /** When the registry last answered this signal. */
  private good?: number;
  /** The trouble: after `from` (the last good answer before it), until `to` (undefined: it lasts). */
  private from?: number;
  private to?: number;

  constructor(private readonly o: TroubleOptions) {}

  /** The registry answered. */
  ok(): void {
    const now = this.o.now();
    this.good = now;
    if (this.from !== undefined && this.to === undefined) this.to = now;
  }

  /** The registry did not answer (unreachable, or refused the write). */
  failed(): void {
    const now = this.o.now();
    // the same trouble again (or again within its grace): it started when the first did
    if (this.from !== undefined && (this.to === undefined || now < this.to + this.o.graceMs)) {
      this.to = undefined;
      return;
    }
    this.from = this.good ?? now;
    this.to = undefined;
  }

  /** Whether a lease that ran out at `lapsedAt` (monotonic ms) is not counted as lapsed now. */
  excuses(lapsedAt: number): boolean {
    const now = this.o.now();
    if (this.o.lateMs !== undefined && this.good !== undefined && now - this.good > this.o.lateMs && lapsedAt >= this.good) return true;
    if (this.from === undefined || lapsedAt < this.from) return false;
    return this.to === undefined || now < this.to + this.o.graceMs;
  }
}
