// Who may start an SSH handshake, decided per TCP connection before any protocol or crypto work:
// connections that have not authenticated yet are capped per source (an IPv4 address or an IPv6
// /64, which one party usually holds whole) and in total; one over its source's cap is destroyed
// at once. When the total is reached a newcomer still gets a slot while some holder (an IPv4
// address or an IPv6 /56) holds at least two more than its own: that holder's oldest
// unauthenticated connection is destroyed for it (fair shares, ../slots.ts), so idle connections
// from a few dozen addresses cannot lock everyone else out; otherwise it is destroyed at once.
// Every admitted connection has a hard login deadline from its accept: unless it authenticates
// in time its socket is destroyed (not half-closed), whether it stayed silent, sent only its
// banner or stalled mid-handshake. A slot is freed when the connection authenticates or its
// socket closes.

import type { Socket } from 'node:net';
import { FairSlots, holderKey, sourceKey } from '../slots.js';
import { normalizeIp } from './ratelimit.js';

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
  /** Called when a full listener destroys an unauthenticated connection (from `ip`) for a
   *  newcomer (from `newcomer`), at most once per newcomer source per 10 s. */
  onEvicted?(ip: string, newcomer: string): void;
}

export interface Ticket {
  readonly source: string;
  /** The connection logged in: its slot is freed and its deadline cancelled. */
  authenticated(): void;
}

/** At most one refusal report per source in this time (a flood is one log line, not thousands). */
const REPORT_MS = 10_000;

interface Pending {
  readonly socket: Socket;
  /** Frees the slot (once). */
  readonly release: () => void;
}

export class Admission {
  private readonly perSource = new Map<string, number>();
  private readonly slots = new FairSlots<Pending>();
  private total = 0;
  private readonly reported = new Map<string, number>();

  constructor(private readonly opts: AdmissionOptions) {}

  /**
   * Admits `socket` from `ip` (already normalized), or destroys it at once and returns null when
   * its source is full, or the listener is and no holder holds two more than its own (fair shares,
   * slots.ts); otherwise, with the listener full, the oldest unauthenticated connection of the
   * holder holding the most is destroyed for it. An admitted socket is destroyed by its deadline
   * unless it logs in.
   */
  admit(socket: Socket, ip: string): Ticket | null {
    const source = sourceKey(ip);
    const holder = holderKey(ip);
    const held = this.perSource.get(source) ?? 0;
    const victim = held < this.opts.maxPerSource && this.total >= this.opts.maxTotal ? this.slots.victim(holder) : undefined;
    if (held >= this.opts.maxPerSource || (this.total >= this.opts.maxTotal && !victim)) {
      socket.on('error', () => {});
      socket.destroy();
      if (held >= this.opts.maxPerSource)
        this.report(source, () => this.opts.onRefused?.(ip, 'too many unauthenticated connections from this address', this.opts.maxPerSource));
      else this.report('*', () => this.opts.onRefused?.(ip, 'too many unauthenticated connections', this.opts.maxTotal));
      return null;
    }
    if (victim) {
      victim.release();
      victim.socket.on('error', () => {});
      victim.socket.destroy();
      this.report(`evicted for ${source}`, () => this.opts.onEvicted?.(normalizeIp(victim.socket.remoteAddress), ip));
    }
    this.perSource.set(source, held + 1);
    this.total += 1;
    let open = true;
    const release = () => {
      if (!open) return;
      open = false;
      clearTimeout(deadline);
      this.total -= 1;
      this.slots.remove(holder, pending);
      const n = (this.perSource.get(source) ?? 1) - 1;
      if (n > 0) this.perSource.set(source, n);
      else this.perSource.delete(source);
    };
    const pending: Pending = { socket, release };
    this.slots.add(holder, pending);
    const deadline = setTimeout(() => {
      if (!open) return;
      this.opts.onTimeout?.(source, ip);
      socket.destroy();
    }, this.opts.graceMs);
    deadline.unref();
    socket.once('close', release);
    return { source, authenticated: release };
  }

  /** Calls `say` unless something was said under `key` in the last REPORT_MS. */
  private report(key: string, say: () => void): void {
    const now = Date.now();
    if ((this.reported.get(key) ?? 0) > now - REPORT_MS) return;
    if (this.reported.size >= 10_000) this.reported.clear();
    this.reported.set(key, now);
    say();
  }

  /** Unauthenticated connections held now, in total or by the source of `ip`. */
  unauthenticated(ip?: string): number {
    return ip === undefined ? this.total : (this.perSource.get(sourceKey(ip)) ?? 0);
  }
}
