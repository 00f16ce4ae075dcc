// What a name no cache knows may cost: a registry read. A stranger sending random names (Hosts
// the front does not know, SSH keys no server has, ACME challenge tokens this host does not hold)
// must not turn that into a registry read per request. A name asked within the last NEGATIVE_MS
// and found unknown is answered "unknown" from here; otherwise a read needs a token from its
// source's bucket (IPv4 address, IPv6 /64) and from the host's. Each use keeps its own budget
// (one instance each: the channel's front, the SSH server, the HTTP-01 responder).

import { sourceKey } from './slots.js';

/** How long a name the registry did not know is answered unknown without asking again. */
export const NEGATIVE_MS = 1000;
/** Registry reads one source may cause: a burst, then so many a second. */
export const SOURCE_BURST = 8;
export const SOURCE_RATE = 4;
/** The same for every source together. */
export const HOST_BURST = 50;
export const HOST_RATE = 20;
/** Entries kept before the oldest are forgotten (memory stays bounded whatever the names). */
const MAX_ENTRIES = 20_000;

interface Bucket {
  tokens: number;
  at: number;
}

export class MissBudget {
  private readonly negative = new Map<string, number>();
  private readonly sources = new Map<string, Bucket>();
  private readonly host: Bucket;
  /** Reads refused by a budget (for tests and status). */
  refused = 0;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.host = { tokens: HOST_BURST, at: this.now() };
  }

  /** Whether a miss for `name` from `ip` may read the registry now (takes the tokens when it may). */
  allow(name: string, ip: string): boolean {
    const t = this.now();
    const until = this.negative.get(name);
    if (until !== undefined && until > t) return false;
    const key = sourceKey(ip);
    let b = this.sources.get(key);
    if (!b) {
      if (this.sources.size >= MAX_ENTRIES) this.sources.delete(this.sources.keys().next().value!);
      this.sources.set(key, (b = { tokens: SOURCE_BURST, at: t }));
    }
    if (!take(b, t, SOURCE_BURST, SOURCE_RATE) || !take(this.host, t, HOST_BURST, HOST_RATE)) {
      this.refused++;
      return false;
    }
    return true;
  }

  /** Whether `name` was found unknown within NEGATIVE_MS (a refusal of `allow` for it is that
   *  answer, not a spent budget). */
  knownUnknown(name: string): boolean {
    const until = this.negative.get(name);
    return until !== undefined && until > this.now();
  }

  /** The registry did not know `name` either. */
  unknown(name: string): void {
    if (this.negative.size >= MAX_ENTRIES) this.negative.delete(this.negative.keys().next().value!);
    this.negative.delete(name);
    this.negative.set(name, this.now() + NEGATIVE_MS);
  }
}

function take(b: Bucket, t: number, burst: number, rate: number): boolean {
  b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * rate);
  b.at = t;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}
