// Who may start an SSH handshake, decided per TCP connection before any protocol or crypto work:
// connections that have not authenticated yet are capped per source (an IPv4 address or an IPv6
// /64, which one party usually holds whole) and in total; one over either cap is destroyed at
// once. Every admitted connection has a hard login deadline from its accept: unless it
// authenticates in time its socket is destroyed (not half-closed), whether it stayed silent,
// sent only its banner or stalled mid-handshake. A slot is freed when the connection
// authenticates or its socket closes.

import { isIPv6, type Socket } from 'node:net';

export interface AdmissionOptions {
  /** Unauthenticated connections one source may hold at once. */
  maxPerSource: number;
  /** Unauthenticated connections the listener holds at once. */
  maxTotal: number;
  /** Milliseconds from accept to a successful login before the socket is destroyed. */
  graceMs: number;
  /** Called when a connection's deadline destroys it (for the log). */
  onTimeout?(source: string, ip: string): void;
  /** Called for a refused connection, at most once per source (or once for the total cap) per 10 s. */
  onRefused?(ip: string, why: string, limit: number): void;
}

export interface Ticket {
  readonly source: string;
  /** The connection logged in: its slot is freed and its deadline cancelled. */
  authenticated(): void;
}

/** At most one refusal report per source in this time (a flood is one log line, not thousands). */
const REPORT_MS = 10_000;

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

/** The party a connection is counted against: the IPv4 address, or the /64 of an IPv6 one. */
export function sourceOf(ip: string): string {
  const bare = ip.split('%')[0];
  if (!isIPv6(bare)) return ip;
  const g = ipv6Groups(bare);
  return `${g
    .slice(0, 4)
    .map((n) => n.toString(16))
    .join(':')}::/64`;
}

export class Admission {
  private readonly perSource = new Map<string, number>();
  private total = 0;
  private readonly reported = new Map<string, number>();

  constructor(private readonly opts: AdmissionOptions) {}

  /**
   * Admits `socket` from `ip` (already normalized), or destroys it at once and returns null when
   * a cap is full. An admitted socket is destroyed by its deadline unless it logs in.
   */
  admit(socket: Socket, ip: string): Ticket | null {
    const source = sourceOf(ip);
    const held = this.perSource.get(source) ?? 0;
    if (held >= this.opts.maxPerSource || this.total >= this.opts.maxTotal) {
      socket.on('error', () => {});
      socket.destroy();
      if (held >= this.opts.maxPerSource) this.report(source, ip, 'too many unauthenticated connections from this address', this.opts.maxPerSource);
      else this.report('*', ip, 'too many unauthenticated connections', this.opts.maxTotal);
      return null;
    }
    this.perSource.set(source, held + 1);
    this.total += 1;
    let open = true;
    const release = () => {
      if (!open) return;
      open = false;
      clearTimeout(deadline);
      this.total -= 1;
      const n = (this.perSource.get(source) ?? 1) - 1;
      if (n > 0) this.perSource.set(source, n);
      else this.perSource.delete(source);
    };
    const deadline = setTimeout(() => {
      if (!open) return;
      this.opts.onTimeout?.(source, ip);
      socket.destroy();
    }, this.opts.graceMs);
    deadline.unref();
    socket.once('close', release);
    return { source, authenticated: release };
  }

  private report(key: string, ip: string, why: string, limit: number): void {
    const now = Date.now();
    if ((this.reported.get(key) ?? 0) > now - REPORT_MS) return;
    if (this.reported.size >= 10_000) this.reported.clear();
    this.reported.set(key, now);
    this.opts.onRefused?.(ip, why, limit);
  }

  /** Unauthenticated connections held now, in total or by the source of `ip`. */
  unauthenticated(ip?: string): number {
    return ip === undefined ? this.total : (this.perSource.get(sourceOf(ip)) ?? 0);
  }
}
