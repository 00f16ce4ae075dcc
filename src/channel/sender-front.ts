// The receiving edge's side of forwarding: `<slug>.{domain}` (or a server's own domain) whose
// server this host does not run goes over the channel to the host that does, with the client's
// address, scheme and request id, the server id and placement epoch this host saw, and one hop.
// This host's own servers (its store has the slug, and the cache places it nowhere else) are
// answered by the local proxy as before;
// a slug no cache knows (within a budget per source: ../misses.ts), or one the cache places here
// that the store does not hold (deleted here, maybe re-created elsewhere), is asked of the
// registry once. A server's own domain of another host's server arrives here routed to its
// `<slug>.{domain}` (the channel's aliases, from the cluster's domain map); the owner is told the
// name and checks it is still its server's, and a "not here" for it is looked up again as a
// domain. A body is kept in memory up to
// `retryBody`, within the retry budget of its source and of the host (sender-body.ts), so the request
// can be sent again once when the owner answers "not here" (its placement moved: the cache was
// stale); a larger one, or one beyond the budget, is streamed and not retried. A lane request
// the owner turned away is replayed by node's server after one registry read, not to the same
// host again. A host that is down (its lease ran out and its channel does not answer) or cannot be
// reached answers at once 503 host_unavailable; an address that leads back here, 502
// forward_loop. WebSocket handshakes take the same way (wire-tunnel.ts).

import type { IncomingMessage } from 'node:http';
import type { OutgoingHttpHeaders } from 'node:http2';
import type { Duplex, Readable } from 'node:stream';
import { AppError } from '../errors.js';
import { rawError, type HttpApp, type LaneApp, type Req, type RequestInfo, type Res, type UpgradeApp } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { sendErrorPage } from '../proxy/index.js';
import type { Placements, PlacementToRoute } from './lookup.js';
import type { ChannelHealth } from './sender-health.js';
import { MissBudget } from '../misses.js';
import { rawForward } from './sender-rawlane.js';
import { hostUnavailable, openForwarded, readBody, relay, sendForwarded, type Body, type RetryKeep } from './sender-outbound.js';
import { CANCEL, type Peers } from './sender-peers.js';
import { H, NOT_HERE } from './wire.js';

export type LocalProxy = HttpApp & Partial<UpgradeApp> & Partial<LaneApp>;

export interface FrontDeps {
  local: LocalProxy;
  servers: { bySlug(slug: string): unknown };
  placements: Placements;
  peers: Peers;
  self: string;
  /** Bodies kept for a retry after "not here": cluster.forwardRetryBody each, within the budget. */
  retry: RetryKeep;
  log: Logger;
  health?: ChannelHealth;
}

/** What the owner checks: the server and epoch this host saw, and the domain the client named. */
const meant = (p: PlacementToRoute, info: RequestInfo): OutgoingHttpHeaders => ({
  [H.server]: p.serverId,
  [H.epoch]: String(p.epoch),
  ...(info.alias !== undefined ? { [H.alias]: info.alias } : {}),
});

export class ClusterFront implements HttpApp, UpgradeApp {
  readonly lane?: LaneApp['lane'];
  /** Lane requests handed back unanswered (the owner said "not here", or the stream broke), by
   *  request id: their replay asks the registry before it goes anywhere, so a stale route costs
   *  one trip to the old owner, not two. */
  private readonly replayed = new Set<string>();
  /** Registry reads for names no cache knows, bounded per source. */
  readonly misses = new MissBudget();

  constructor(private readonly d: FrontDeps) {
    const local = d.local.lane?.bind(d.local);
    // a lane request for a server of another host goes on the raw lane (sender-rawlane.ts); when its pool
    // cannot take it (at its cap, not open yet, a peer without the lane), to node's server, which
    // forwards it over the HTTP/2 session (opening it, retrying, making error pages)
    if (local)
      this.lane = (r, sock, info, done) => {
        const p = this.remote(info.slug);
        if (!p) return local(r, sock, info, done);
        const host = this.d.placements.host(p.host);
        if (!host?.up) return false;
        const turnedAway = () => {
          if (this.replayed.size >= 1024) this.replayed.clear(); // replays a gone client never sent
          this.replayed.add(info.requestId);
        };
        const told = (o: Parameters<typeof done>[0]) => {
          this.d.health?.lane(p.host, o.kind);
          done(o);
        };
        const raw = this.d.peers.raw(p.host, host.advertise);
        return (raw && rawForward(raw, this.d.peers.date, r, sock, info, p, told, turnedAway)) || false;
      };
  }

  /** The placement of a slug when the cache names another host: one this host does not run, or
   *  one it still has a copy of that the registry placed elsewhere (recovered or moved there; the
   *  copy here is dropped: hosting's stalecopies.ts). A cache that lags a move to this host costs
   *  one "not here", whose replay is answered here. */
  private remote(slug: string): PlacementToRoute | undefined {
    const p = this.d.placements.bySlug(slug);
    return p && p.host !== this.d.self ? p : undefined;
  }

  /** Whether this host runs the slug's server: its store has it and the cache places it nowhere
   *  else (a copy the registry re-placed is asked of the registry, even on a replay). */
  private here(slug: string): boolean {
    if (!this.d.servers.bySlug(slug)) return false;
    const p = this.d.placements.bySlug(slug);
    return !p || p.host === this.d.self;
  }

  /** Where a slug's server runs: here (undefined) or on another host. The registry is asked when
   *  no cache knows (within `misses`: a stranger's random names cost bounded reads), when the
   *  cache places it here but this host's store has no such server (it was deleted here and may
   *  live elsewhere now, the notification not in yet), and for the replay of a lane request the
   *  owner turned away. */
  private async where(slug: string, ip: string, replayOf?: string): Promise<PlacementToRoute | undefined> {
    const cached = this.d.placements.bySlug(slug);
    const tried = replayOf !== undefined && this.replayed.delete(replayOf);
    if (this.here(slug)) return undefined;
    if (cached && cached.host !== this.d.self && !tried) return cached;
    if (!cached && !this.misses.allow(slug, ip)) return undefined;
    const p = await this.d.placements.fresh(slug).catch(() => cached);
    if (!p && !cached) this.misses.unknown(slug);
    return p && p.host !== this.d.self ? p : undefined;
  }

  handle(req: Req, res: Res, info: RequestInfo): Promise<void> | void {
    if (info.failure) return this.d.local.handle(req, res, info);
    const slug = info.host.slice(0, info.host.indexOf('.'));
    const known = this.replayed.size && this.replayed.has(info.requestId) ? undefined : this.remote(slug);
    if (known) return this.forward(req, res, info, known);
    if (this.here(slug)) return this.d.local.handle(req, res, info);
    return this.where(slug, info.ip, info.requestId).then((p) => (p ? this.forward(req, res, info, p) : this.d.local.handle(req, res, info)));
  }

  private async forward(req: Req, res: Res, info: RequestInfo, p: PlacementToRoute): Promise<void> {
    const body = await readBody(req, this.d.retry, info.ip);
    if (!body) return void (res as { destroy?: () => void }).destroy?.(); // the client went away mid-body
    try {
      await this.send(req, res, info, p, body);
    } finally {
      body.release();
    }
  }

  private async send(req: Req, res: Res, info: RequestInfo, p: PlacementToRoute, body: Body): Promise<void> {
    let answer = await sendForwarded(this.d, p.host, req, info, meant(p, info), body);
    if (answer instanceof AppError) return sendErrorPage(req, res, answer, info.requestId);
    if (Number(answer.headers[':status']) === NOT_HERE) {
      answer.stream.close(CANCEL);
      if (body.rest) return sendErrorPage(req, res, hostUnavailable(p.host, 'no longer runs it'), info.requestId);
      const alias = info.alias;
      const pl = this.d.placements;
      const now = await (alias === undefined ? pl.fresh(p.slug) : (pl.freshDomain?.(alias) ?? Promise.resolve(undefined))).catch(() => undefined);
      if (alias !== undefined) {
        if (!now) return sendErrorPage(req, res, AppError.of('unknown_host', `${alias} is no longer the domain of a server`), info.requestId);
        info.host = now.slug + info.host.slice(info.host.indexOf('.')); // the server that holds it now
      }
      // gone, or here now: this host's proxy answers (the unknown-server page, or the server) when nothing was read
      if ((!now || now.host === this.d.self) && !body.chunks.length) return this.d.local.handle(req, res, info);
      if (!now || now.host === this.d.self || (now.host === p.host && now.epoch === p.epoch)) {
        return sendErrorPage(req, res, hostUnavailable(p.host, 'no longer runs it'), info.requestId);
      }
      answer = await sendForwarded(this.d, now.host, req, info, meant(now, info), body);
      if (answer instanceof AppError) return sendErrorPage(req, res, answer, info.requestId);
      if (Number(answer.headers[':status']) === NOT_HERE) {
        answer.stream.close(CANCEL);
        return sendErrorPage(req, res, hostUnavailable(now.host, 'no longer runs it'), info.requestId);
      }
    }
    relay(answer, res);
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo & { slug: string }): void {
    const local = this.d.local.upgrade;
    void this.where(info.slug, info.ip)
      .then((p) => {
        if (!p) return local ? local.call(this.d.local, req, socket, head, info) : socket.destroy();
        return this.tunnel(req, socket, head, info, p);
      })
      .catch((e) => {
        this.d.log.error('forwarded upgrade failed', { err: e });
        socket.destroy();
      });
  }

  /** A WebSocket handshake to another host: the client's bytes and the owner's, both ways over one stream. */
  private async tunnel(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo, p: PlacementToRoute): Promise<void> {
    const stream = await openForwarded(this.d, p.host, req, info, { ...meant(p, info), [H.upgrade]: String(req.headers.upgrade ?? '') }, false);
    if (stream instanceof AppError) return (this.d.health?.refused(p.host, stream.code), rawError(socket, stream, { requestId: info.requestId }));
    stream.on('error', () => socket.destroy());
    socket.on('close', () => {
      if (!stream.closed) stream.close(CANCEL);
    });
    stream.once('response', (h) => {
      this.d.health?.forwarded(p.host, Number(h[':status']) === 200 ? 'answered' : 'not_here');
      if (Number(h[':status']) !== 200) {
        stream.close(CANCEL);
        return rawError(socket, hostUnavailable(p.host, 'no longer runs it'), { requestId: info.requestId });
      }
      (stream as Readable).pipe(socket);
    });
    if (head.length) stream.write(head);
    socket.pipe(stream);
  }
}
