// The owner's side of the raw lane: a channel connection that chose MUX_ALPN (after the same
// mutual TLS under the cluster CA as the HTTP/2 session: owner-server.ts) carries many forwarded lane
// requests at once as wire-mux.ts streams (sender-rawpool.ts sends them). Each is given to this host's
// proxy lane as if its client had come here, with a socket of its own (owner-stream.ts): the
// app's answer, HTTP/1.1 as the lane writes it, goes back as DATA frames — the answers of one turn
// of the event loop in one write — and egress is metered here from the bytes handed to the
// connection. An answer runs at most STREAM_WINDOW bytes ahead of what the sender's client took
// (its CREDIT frames), so a slow client holds back its own app, not the others. The client's
// address, scheme and request id are read from the channel's fields, trusted because the peer
// proved it is a cluster host; those fields never reach the app. A head for a server this host
// does not run at the epoch the sender saw is answered "not here" (421); one the proxy's lane does
// not take (static files, an unknown server), "full path" (421 marked x-rootbox-full-path): the
// sender sends it, and that server's next requests for a while, by the full path (HTTP/2). A head
// the lane reader does not take, a loop, or a request the lane hands back (a page for a failure,
// a wait for the app) ends its stream REPLAY, with the failure: the sender's full path answers it.
// Bounds: a head at most MAX_REQUEST_HEAD, MAX_STREAMS at once per connection, at most
// `maxPerPeer` connections per peer host, a connection without streams closed after `idleMs`.

import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { systemClock, type Clock, type Timer } from '../clock.js';
import type { AppError } from '../errors.js';
import { readRequest } from '../h1/index.js';
import type { LaneApp, LaneExchange, LaneRequest, RequestInfo } from '../http/index.js';
import { ANSWERED, CANCEL, CREDIT, DATA, END, FrameReader, HEAD, MAX_STREAMS, Outbox, REPLAY } from './wire-mux.js';
import { endPayload, OwnerStream, type StreamConn } from './owner-stream.js';
import { H, NOT_HERE, PREFIX } from './wire.js';

/** What a forwarded request claims about the server it is for, checked before it is answered. */
export interface Claim {
  server: string | undefined;
  epoch: number;
  hops: number;
  /** A server's own domain the client asked for: the owner checks it is still that server's. */
  alias?: string;
}

export interface RawOwnerDeps {
  lane: LaneApp['lane'] | undefined;
  /** Why a request is not answered here (owner-server.ts: a loop, or not this host's server at that epoch). */
  refusal(peer: string, claim: Claim, info: RequestInfo): 'loop' | 'not-here' | undefined;
  maxPerPeer: number;
  idleMs: number;
  /** The idle timer's time (tests move it). */
  clock?: Clock;
}

const NOT_HERE_ANSWER = `HTTP/1.1 ${NOT_HERE} Misdirected Request\r\n${H.notHere}: 1\r\ncontent-length: 0\r\n\r\n`;
const FULL_PATH_ANSWER = `HTTP/1.1 ${NOT_HERE} Misdirected Request\r\n${H.fullPath}: 1\r\ncontent-length: 0\r\n\r\n`;
/** Answer bytes queued on a connection beyond which every stream's writer is told to wait. */
const CONN_HIGH = 4 * 1024 * 1024;

export class RawOwner {
  private readonly perPeer = new Map<string, number>();
  private readonly open = new Set<OwnerConn>();

  constructor(private readonly d: RawOwnerDeps) {}

  /** A verified raw lane connection from `peer`. */
  accept(sock: TLSSocket, peer: string): void {
    const n = this.perPeer.get(peer) ?? 0;
    if (n >= this.d.maxPerPeer) return void sock.destroy();
    this.perPeer.set(peer, n + 1);
    const c = new OwnerConn(sock, peer, this.d);
    this.open.add(c);
    sock.once('close', () => {
      this.open.delete(c);
      const left = (this.perPeer.get(peer) ?? 1) - 1;
      if (left > 0) this.perPeer.set(peer, left);
      else this.perPeer.delete(peer);
    });
  }

  /** At a stop: idle connections close now, those answering too when `all`. */
  close(all: boolean): void {
    for (const c of this.open) c.close(all);
  }
}

class OwnerConn implements StreamConn {
  readonly streams = new Map<number, OwnerStream>();
  readonly out: Outbox;
  /** Streams told to wait for the connection's own drain. */
  readonly blocked = new Set<OwnerStream>();
  /** Streams with answer bytes in the outbox. */
  readonly unflushed = new Set<OwnerStream>();
  private readonly reader: FrameReader;
  private readonly idle: Timer;
  /** The highest stream id seen: ids only grow, so a smaller one is a stream already over. */
  private lastId = 0;

  constructor(
    readonly sock: TLSSocket,
    private readonly peer: string,
    private readonly d: RawOwnerDeps,
  ) {
    this.out = new Outbox(sock, (sent) => {
      for (const s of this.unflushed) s.flushed(sent);
      this.unflushed.clear();
    });
    this.reader = new FrameReader((type, id, payload) => this.frame(type, id, payload));
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => {
      try {
        this.reader.feed(d);
      } catch {
        sock.destroy(); // not a sender of ours
      }
    });
    sock.on('drain', () => {
      for (const s of this.blocked) s.maybeDrain();
    });
    sock.on('end', () => (this.streams.size === 0 ? sock.end() : undefined));
    sock.on('error', noop);
    sock.on('close', () => this.gone());
    // streams under way are not idleness (a long download, a wake): the timer looks again later
    this.idle = (d.clock ?? systemClock).after(d.idleMs, () => (this.streams.size > 0 ? this.idle.refresh() : sock.destroy()));
  }

  close(all: boolean): void {
    if (all || this.streams.size === 0) this.sock.destroy();
  }

  /** The connection's own buffer is over its mark: writers wait for it too. */
  crowded(): boolean {
    return this.sock.writableLength + this.out.queued >= CONN_HIGH;
  }

  private frame(type: number, id: number, payload: Buffer): void {
    if (this.sock.destroyed) return;
    if (type === HEAD) {
      if (id <= this.lastId || id % 2 === 0 || this.streams.size >= MAX_STREAMS) return void this.sock.destroy();
      this.lastId = id;
      return this.head(id, payload);
    }
    const s = this.streams.get(id);
    if (!s) return; // a stream already over: its CANCEL or CREDIT crossed its END
    if (type === CREDIT) return s.credit(payload.readUInt32BE(0));
    if (type === CANCEL) return s.cancel();
    this.sock.destroy();
  }

  private head(id: number, payload: Buffer): void {
    const read = readRequest(payload);
    if (read.kind !== 'head' || read.size !== payload.length) return void this.end(id, REPLAY); // the full path reads it
    const { info, claim, raw } = channelFields(read.head);
    const r: LaneRequest = { method: read.head.method, target: read.head.target, host: read.head.host, raw, close: read.head.close };
    const refused = this.d.refusal(this.peer, claim, info);
    if (refused === 'loop' || !this.d.lane) return void this.end(id, REPLAY);
    if (refused === 'not-here') return this.answer(id, NOT_HERE_ANSWER);
    const s = new OwnerStream(this, id);
    this.streams.set(id, s);
    this.idle.refresh();
    let taken: LaneExchange | false;
    try {
      taken = this.d.lane(r, s as unknown as Duplex, info, (o) => s.done(o));
    } catch {
      taken = false;
    }
    if (taken) s.exchange = taken;
    else if (!s.over) {
      s.over = true;
      this.streams.delete(id);
      this.answer(id, FULL_PATH_ANSWER);
    }
  }

  private answer(id: number, text: string): void {
    this.out.frame(DATA, id, text);
    this.end(id, ANSWERED);
  }

  /** Ends stream `id` on the wire (`failure`: a replay's, for the sender's full path to answer with). */
  end(id: number, kind: number, failure?: AppError): void {
    this.out.frame(END, id, endPayload(kind, failure));
  }

  forget(s: OwnerStream): void {
    this.streams.delete(s.id);
    this.blocked.delete(s);
    if (this.streams.size === 0 && !this.sock.readable) this.sock.end(); // the sender is done sending: close once answered
  }

  private gone(): void {
    this.idle.cancel();
    const all = [...this.streams.values()];
    this.streams.clear();
    for (const s of all) s.cancel();
  }
}

/** The channel's fields of a head (dropped from what goes on to the app) and the rest of its fields. */
function channelFields(h: { raw: string[]; rid?: string }): { info: RequestInfo & { slug: string }; claim: Claim; raw: string[] } {
  const raw: string[] = [];
  let site = '';
  let ip = '';
  let scheme: 'http' | 'https' = 'https';
  const claim: Claim = { server: undefined, epoch: NaN, hops: 0 };
  for (let i = 0; i < h.raw.length; i += 2) {
    const name = h.raw[i];
    if (name.length < PREFIX.length || name.slice(0, PREFIX.length).toLowerCase() !== PREFIX) {
      raw.push(name, h.raw[i + 1]);
      continue;
    }
    const v = h.raw[i + 1];
    switch (name.toLowerCase()) {
      case H.site:
        site = v;
        break;
      case H.ip:
        ip = v;
        break;
      case H.scheme:
        scheme = v === 'http' ? 'http' : 'https';
        break;
      case H.server:
        claim.server = v;
        break;
      case H.epoch:
        claim.epoch = Number(v);
        break;
      case H.hops:
        claim.hops = Number(v) || 0;
        break;
      case H.alias:
        claim.alias = v;
        break;
    }
  }
  const info = { host: site, slug: site.slice(0, site.indexOf('.')), scheme, requestId: h.rid ?? '', ip };
  return { info, claim, raw };
}

function noop(): void {}
