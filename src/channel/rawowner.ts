// The owner's raw lane: a channel connection that chose HTTP/1.1 (ALPN, after the same mutual TLS
// under the cluster CA as the HTTP/2 session: server.ts) carries one forwarded lane request at a
// time (rawlane.ts), each given to this host's proxy lane as if its client had come here: the
// app's answer is written as HTTP/1.1 straight onto this connection, egress metered here from the
// bytes written on it. The client's address, scheme and request id are read from the channel's
// fields, trusted because the peer proved it is a cluster host; those fields never reach the app.
// A head for a server this host does not run at the epoch the sender saw is answered "not here"
// (421) on the spot and the connection carries on; so is one the proxy's lane does not take
// (static files, an unknown server), marked x-rootbox-full-path: the sender sends it (and that
// server's next requests for a while) by the full path, HTTP/2, as before. Everything else — a head
// the lane reader does not take, a loop, a request the lane hands back (a failure to answer as a
// page, or a wait for the app) — gives the connection, from that request on, to node's HTTP server
// for good (`handover`, with the failure), which answers it by the full path.
// Bounds: one request at a time, a head at most MAX_REQUEST_HEAD, at most `maxPerPeer`
// connections per peer host, an idle connection closed after `idleMs`.

import type { TLSSocket } from 'node:tls';
import type { AppError } from '../errors.js';
import { MAX_REQUEST_HEAD, readRequest } from '../h1/index.js';
import type { LaneApp, LaneExchange, LaneOutcome, LaneRequest, RequestInfo } from '../http/index.js';
import { H, NOT_HERE } from './wire.js';

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
  /** Why a request is not answered here (server.ts: a loop, or not this host's server at that epoch). */
  refusal(peer: string, claim: Claim, info: RequestInfo): 'loop' | 'not-here' | undefined;
  /** node's HTTP server takes the connection from the bytes given on (the full path). */
  handover(sock: TLSSocket, pending: Buffer | undefined, ended: boolean, failure: AppError | undefined): void;
  maxPerPeer: number;
  idleMs: number;
}

const NOT_HERE_ANSWER = `HTTP/1.1 ${NOT_HERE} Misdirected Request\r\n${H.notHere}: 1\r\ncontent-length: 0\r\n\r\n`;
const FULL_PATH_ANSWER = `HTTP/1.1 ${NOT_HERE} Misdirected Request\r\n${H.fullPath}: 1\r\ncontent-length: 0\r\n\r\n`;
const PREFIX = 'x-rootbox-';

export class RawOwner {
  private readonly perPeer = new Map<string, number>();
  private readonly open = new Set<OwnerConn>();

  constructor(private readonly d: RawOwnerDeps) {}

  /** A verified HTTP/1.1 channel connection from `peer`. */
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

class OwnerConn {
  private pending: Buffer | undefined;
  private busy = false;
  private gone = false;
  private ended = false;
  private current: LaneExchange | undefined;
  private idle: NodeJS.Timeout;

  constructor(
    private readonly sock: TLSSocket,
    private readonly peer: string,
    private readonly d: RawOwnerDeps,
  ) {
    sock.setNoDelay(true);
    sock.on('data', this.onData);
    sock.on('end', this.onEnd);
    sock.on('error', noop);
    sock.on('close', this.onClose);
    // an answer under way is not idleness (a long download, a wake): the timer looks again later
    this.idle = setTimeout(() => (this.busy ? this.idle.refresh() : sock.destroy()), d.idleMs).unref();
  }

  private readonly onData = (d: Buffer): void => {
    this.pending = this.pending ? Buffer.concat([this.pending, d]) : d;
    // the sender sends one request at a time: more than a head's worth unread is not a sender of ours
    if (this.busy) {
      if (this.pending.length > MAX_REQUEST_HEAD) this.sock.destroy();
      return;
    }
    this.next();
  };

  private readonly onEnd = (): void => {
    this.ended = true;
    if (!this.busy) this.sock.end();
  };

  private readonly onClose = (): void => {
    clearTimeout(this.idle);
    const c = this.current;
    this.current = undefined;
    c?.clientGone();
  };

  close(all: boolean): void {
    if (!this.gone && (all || !this.busy)) this.sock.destroy();
  }

  private next(): void {
    const buf = this.pending;
    if (!buf || this.gone) return;
    const read = readRequest(buf);
    if (read.kind === 'more') return;
    if (read.kind === 'node') return this.giveAway(undefined);
    const { info, claim, raw } = channelFields(read.head);
    const r: LaneRequest = { method: read.head.method, target: read.head.target, host: read.head.host, raw, close: read.head.close };
    const refused = this.d.refusal(this.peer, claim, info);
    if (refused === 'loop' || !this.d.lane) return this.giveAway(undefined);
    this.pending = read.size < buf.length ? buf.subarray(read.size) : undefined;
    if (refused === 'not-here') {
      this.sock.write(NOT_HERE_ANSWER, 'latin1');
      return this.next();
    }
    const head = buf.subarray(0, read.size);
    this.busy = true;
    this.idle.refresh();
    let taken: LaneExchange | false;
    try {
      taken = this.d.lane(r, this.sock, info, (o) => this.done(o, head));
    } catch {
      taken = false;
    }
    if (taken) this.current = taken;
    else if (this.busy) {
      this.busy = false;
      this.sock.write(FULL_PATH_ANSWER, 'latin1');
      this.next();
    }
  }

  private done(o: LaneOutcome, head: Buffer): void {
    if (!this.busy) return;
    this.busy = false;
    this.current = undefined;
    if (o.kind === 'replay') {
      this.pending = this.pending ? Buffer.concat([head, this.pending]) : head;
      return this.giveAway(o.failure);
    }
    if (o.kind === 'cut') return void this.sock.destroy();
    this.idle.refresh();
    if (!o.reusable) return void this.sock.end();
    if (this.pending) this.next();
    else if (this.ended) this.sock.end();
  }

  private giveAway(failure: AppError | undefined): void {
    if (this.gone) return;
    this.gone = true;
    clearTimeout(this.idle);
    const s = this.sock;
    s.off('data', this.onData);
    s.off('end', this.onEnd);
    s.off('close', this.onClose);
    s.off('error', noop);
    const pending = this.pending;
    this.pending = undefined;
    this.d.handover(s, pending, this.ended, failure);
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
    if (name.length < 10 || name.slice(0, 10).toLowerCase() !== PREFIX) {
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
