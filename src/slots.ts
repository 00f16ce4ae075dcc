// Fair shares of a capped pool of connections (the SSH listener's unauthenticated ones, the
// edge's open ones). Connections are counted by source for the per-source caps (an IPv4 address
// or an IPv6 /64: sourceKey) and by holder for fairness (an IPv4 address or an IPv6 /56:
// holderKey — one customer line or site is routinely given a whole /56, so its /64s are one
// party). When the pool is full a newcomer takes a slot from the holder holding the most, its
// oldest connection that may be taken, but only from a holder holding at least two more than the
// newcomer's own (after the swap the holder still holds at least as many as the newcomer): an
// address holding nothing gets in unless every holder holds one slot, and equal holders never
// take slots from each other back and forth. Filling the pool then takes as many holders as it
// has slots, not pool/per-source of them.

import { isIPv6 } from 'node:net';

/** The 8 groups of a valid IPv6 address (`::` and an IPv4 tail expanded). */
function ipv6Groups(ip: string): number[] {
  let s = ip;
  const v4 = /^(.*:)(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (v4) {
    const b = v4.slice(2).map(Number);
    s = `${v4[1]}${((b[0] << 8) | b[1]).toString(16)}:${((b[2] << 8) | b[3]).toString(16)}`;
  }
  const halves = s.split('::');
  const head = halves[0] ? halves[0].split(':') : [];
  const tail = halves.length === 2 && halves[1] ? halves[1].split(':') : [];
  const fill = halves.length === 2 ? 8 - head.length - tail.length : 0;
  return [...head, ...Array<string>(fill).fill('0'), ...tail].map((g) => parseInt(g, 16));
}

/** The IPv4 address (also IPv4-mapped), or the IPv6 prefix of `bits` (a multiple of 8) as `a:b:c:d::/64`. */
function prefixKey(ip: string, bits: 56 | 64): string {
  if (!ip.includes(':')) return ip; // IPv4: the address itself, nothing allocated
  if (ip.startsWith('::ffff:') && ip.includes('.')) return ip.slice(7);
  const bare = ip.split('%')[0];
  if (!isIPv6(bare)) return ip;
  const g = ipv6Groups(bare).slice(0, 4);
  if (bits === 56) g[3] &= 0xff00;
  return `${g.map((n) => n.toString(16)).join(':')}::/${bits}`;
}

/** The source a per-source cap counts: an IPv4 address, or the /64 of an IPv6 one. */
export const sourceKey = (ip: string): string => prefixKey(ip, 64);

/** The holder fair shares count: an IPv4 address, or the /56 of an IPv6 one. */
export const holderKey = (ip: string): string => prefixKey(ip, 56);

/** Who holds which connections of a pool, and whose slot a newcomer takes when it is full. */
export class FairSlots<T> {
  /** Each holder's connections, oldest first (a Set keeps insertion order). */
  private readonly byHolder = new Map<string, Set<T>>();
  /** Holders by how many connections they hold, those that reached the count first first. */
  private readonly byCount = new Map<number, Set<string>>();
  private top = 0;

  add(holder: string, item: T): void {
    const set = this.byHolder.get(holder) ?? new Set<T>();
    if (set.has(item)) return;
    this.move(holder, set.size, set.size + 1);
    this.byHolder.set(holder, set.add(item));
  }

  remove(holder: string, item: T): void {
    const set = this.byHolder.get(holder);
    if (!set?.delete(item)) return;
    this.move(holder, set.size + 1, set.size);
    if (!set.size) this.byHolder.delete(holder);
  }

  held(holder: string): number {
    return this.byHolder.get(holder)?.size ?? 0;
  }

  /**
   * The connection a newcomer of `holder` takes the slot of: the oldest one `takeable` accepts of
   * the holder holding the most, among holders holding at least two more than `holder`; undefined
   * when there is none. Looks at `scan` connections at most (a full pool of busy connections is
   * not walked whole for every newcomer).
   */
  victim(holder: string, takeable: (item: T) => boolean = () => true, scan = 64): T | undefined {
    const least = this.held(holder) + 2;
    let looked = 0;
    for (let n = this.top; n >= least; n--) {
      for (const h of this.byCount.get(n) ?? []) {
        for (const item of this.byHolder.get(h) ?? []) {
          if (takeable(item)) return item;
          if (++looked >= scan) return undefined;
        }
      }
    }
    return undefined;
  }

  private move(holder: string, from: number, to: number): void {
    if (from > 0) {
      const old = this.byCount.get(from);
      old?.delete(holder);
      if (old && !old.size) this.byCount.delete(from);
    }
    if (to > 0) {
      const next = this.byCount.get(to) ?? new Set<string>();
      this.byCount.set(to, next.add(holder));
    }
    if (to > this.top) this.top = to;
    while (this.top > 0 && !this.byCount.has(this.top)) this.top--;
  }
}
