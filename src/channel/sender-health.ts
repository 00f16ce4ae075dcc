// What this host knows of its channel to each peer (issue 29 item 7), for `rootbox cluster status`
// (asked of the running daemon over the admin socket) and Prometheus: whether a session is open
// now, when it opened or closed, the errors (how many, the last one: kind, detail, when), and the
// requests forwarded there by outcome. sender-peers.ts and sender-front.ts record with one call each; every
// call also counts in the metrics registry (metrics.forwarded, metrics.channelError).

import type { LaneOutcome } from '../http/index.js';
import { metrics } from '../metrics/index.js';

/** How one forwarded request (one attempt: a "not here" and its retry are two) ended:
 *  answered (the owner's answer went to the client), not_here (the owner no longer runs the
 *  server), unavailable (503 host_unavailable: down, unreachable, or the stream failed before an
 *  answer), loop (502 forward_loop), cut (a lane answer cut, or its client left). */
export type ForwardOutcome = 'answered' | 'not_here' | 'unavailable' | 'loop' | 'cut';

/** connect (a session could not be opened), loop (the address leads back here), session (an
 *  open session failed), ping (a peer that stopped answering pings), stream (a request's stream
 *  failed before the owner's answer). */
export type ChannelErrorKind = 'connect' | 'loop' | 'session' | 'ping' | 'stream';

export interface PeerHealth {
  peer: string;
  advertise: string | null;
  session: 'up' | 'down';
  /** When the current (or last) session opened; when it closed, if it did. */
  opened_at: string | null;
  closed_at: string | null;
  errors: number;
  last_error: { kind: ChannelErrorKind; detail: string; at: string } | null;
  forwarded: Record<ForwardOutcome, number>;
}

interface State {
  advertise?: string;
  up: boolean;
  opened?: number;
  closed?: number;
  errors: number;
  last?: { kind: ChannelErrorKind; detail: string; at: number };
  forwarded: Record<ForwardOutcome, number>;
}

const iso = (t: number | undefined) => (t === undefined ? null : new Date(t).toISOString());

export class ChannelHealth {
  private readonly peers = new Map<string, State>();

  constructor(private readonly now: () => number = Date.now) {}

  private of(peer: string): State {
    let s = this.peers.get(peer);
    if (!s) this.peers.set(peer, (s = { up: false, errors: 0, forwarded: { answered: 0, not_here: 0, unavailable: 0, loop: 0, cut: 0 } }));
    return s;
  }

  opened(peer: string, advertise: string): void {
    const s = this.of(peer);
    s.up = true;
    s.advertise = advertise;
    s.opened = this.now();
    s.closed = undefined;
  }

  closed(peer: string): void {
    const s = this.of(peer);
    if (!s.up) return;
    s.up = false;
    s.closed = this.now();
  }

  error(peer: string, kind: ChannelErrorKind, detail: string): void {
    const s = this.of(peer);
    s.errors++;
    s.last = { kind, detail: detail.slice(0, 300), at: this.now() };
    metrics.channelError(peer, kind);
  }

  forwarded(peer: string, outcome: ForwardOutcome): void {
    this.of(peer).forwarded[outcome]++;
    metrics.forwarded(peer, outcome);
  }

  /** A request that got no stream: the error the client is answered with says how it ended. */
  refused(peer: string, code: string): void {
    this.forwarded(peer, code === 'forward_loop' ? 'loop' : 'unavailable');
  }

  /** A request's stream that ended before the owner's answer: a stream error, the client answered 503. */
  stream(peer: string, e?: Error): void {
    this.error(peer, 'stream', e?.message ?? 'the stream closed before an answer');
    this.forwarded(peer, 'unavailable');
  }

  /** How a raw-lane exchange ended (a replay is answered, and counted, by the full path). */
  lane(peer: string, kind: LaneOutcome['kind']): void {
    if (kind !== 'replay') this.forwarded(peer, kind);
  }

  /** Every peer this host has tried, by name. */
  view(): PeerHealth[] {
    return [...this.peers.keys()].sort().map((peer) => {
      const s = this.peers.get(peer)!;
      return {
        peer,
        advertise: s.advertise ?? null,
        session: s.up ? 'up' : 'down',
        opened_at: iso(s.opened),
        closed_at: iso(s.closed),
        errors: s.errors,
        last_error: s.last ? { kind: s.last.kind, detail: s.last.detail, at: new Date(s.last.at).toISOString() } : null,
        forwarded: { ...s.forwarded },
      };
    });
  }
}
