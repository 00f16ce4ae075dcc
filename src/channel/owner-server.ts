// The owner's side of the channel: an HTTP/2 server on cluster.listen that takes only mutual TLS
// with a certificate of the cluster CA (requestCert + rejectUnauthorized: a forged or self-signed
// certificate, or none, never gets a request in). A forwarded request is answered by this host's
// own proxy as if its client had come here (static files without a wake, the app, wake on
// request, egress metered here, once), with the client's address, scheme and request id the
// sender vouches for. Before that, the server the sender meant must be the one this host runs
// under that slug, at the epoch the sender saw: else "not here" (421), and the sender asks the
// registry and retries once; a server's own domain the sender names must still be that server's
// active domain here. A request that already made a hop, or comes from this host itself,
// is a loop: 502 forward_loop. A connection that chose the raw lane's protocol (ALPN MUX_ALPN)
// carries many lane requests at once as streams (owner-raw.ts). A connection is taken only from a
// registered host presenting the key it registered (owner-admit.ts); any other is closed after TLS.

import {
  createSecureServer,
  type Http2SecureServer,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type IncomingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import * as tls from 'node:tls';
import type { TLSSocket } from 'node:tls';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';
import { errorReply, rawError, sendReply, type HttpApp, type Req, type Res, type LaneApp, type RequestInfo, type UpgradeApp } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { answerApi, type ApiOwnerDeps } from './owner-api.js';
import type { PeerAdmission } from './owner-admit.js';
import { peerHost, peerKey, type Identity } from './identity.js';
import type { Placements } from './lookup.js';
import { ownerSsh, type SshAcceptor } from './owner-ssh.js';
import { MUX_ALPN } from './wire-mux.js';
import { RawOwner, type Claim } from './owner-raw.js';
import { handshakeOf, StreamSocket } from './wire-tunnel.js';
import { CONTACT_ASK, dropOwn, H, MAX_HOPS, NOT_HERE, REGISTRY_AGO, SESSION_WINDOW, SSH_KIND, WINDOW } from './wire.js';

export interface ChannelServerDeps {
  identity: () => Identity;
  /** The local proxy: what answers `<slug>.{domain}` for the servers this host runs. */
  local: HttpApp & Partial<UpgradeApp> & Partial<LaneApp>;
  /** This host's own servers by slug (its store). */
  servers: { bySlug(slug: string): { id: string } | undefined; get(id: string): { id: string } | undefined };
  placements: Pick<Placements, 'byServer'>;
  /** The API app, for streams marked `x-rootbox-api` (sender-api.ts). */
  api?: ApiOwnerDeps;
  /** This host's own active domains → slug (hosting's domains): a forwarded domain must still be its server's. */
  aliases?: (host: string) => string | undefined;
  /** This host's SSH server: takes the SSH connections other hosts forward (sender-ssh.ts). */
  ssh?: SshAcceptor;
  /** Which peers are taken (a registered host with its registered key); unset: any certificate of the CA. */
  admit?: PeerAdmission;
  log: Logger;
  /** The raw lane's idle timers' time (tests move it). */
  clock?: Clock;
  /** A request for `<slug>.{domain}` waits for this while its server moves off this host (src/moves), then is checked as usual. */
  hold?: (host: string) => Promise<void> | undefined;
  /** How long ago this host last reached the registry having heard `peer` (registry/contact.ts `vouchAgo`), answered to a peer's CONTACT_ASK. */
  vouch?: (peer: string) => number | undefined;
}

/** How long forwarded requests under way may run on at a stop. */
const CLOSE_GRACE_MS = 2000;

/** Raw lane connections a peer may hold open here (its sender keeps one; a few while one is replaced), and how long one may stay idle. */
const RAW_PER_PEER = 8;
const RAW_IDLE_MS = 60_000;

const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** What a forwarded request's fields claim (the server, the epoch the sender saw, its hops). */
const claimOf = (h: IncomingHttpHeaders): Claim => ({
  server: one(h[H.server]),
  epoch: Number(h[H.epoch]),
  hops: Number(h[H.hops] ?? 0),
  alias: one(h[H.alias]),
});

export class ChannelServer {
  private server?: Http2SecureServer;
  private readonly sessions = new Set<ServerHttp2Session>();
  /** Every connection, also one whose session closed while its peer kept its side open. */
  private readonly sockets = new Set<Socket>();
  private readonly peers = new WeakMap<object, string>();
  private raw?: RawOwner;

  constructor(private readonly d: ChannelServerDeps) {}

  async listen(address: string): Promise<number> {
    const me = this.d.identity();
    const server = (this.server = createSecureServer(
      {
        ca: me.ca,
        cert: me.cert,
        key: me.key,
        requestCert: true,
        rejectUnauthorized: true,
        noDelay: true, // small answers go out at once (Nagle would hold them for the peer's delayed ACK)
        settings: { maxConcurrentStreams: 1000, initialWindowSize: WINDOW },
      },
      (req, res) => this.onRequest(req, res),
    ));
    // node's compatibility layer is a 'stream' listener: SSH streams are taken before it
    const compat = server.listeners('stream')[0] as (...a: unknown[]) => void;
    server.removeAllListeners('stream');
    server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, raw: string[]) => {
      if (headers[CONTACT_ASK] !== undefined) return this.vouch(stream);
      if (headers[SSH_KIND] !== undefined)
        return ownerSsh(stream, headers, { ...this.d, self: this.d.identity().host, peer: this.peerOf(stream.session?.socket) });
      compat.call(server, stream, headers, flags, raw);
    });
    server.on('connection', (sock: Socket) => {
      this.sockets.add(sock);
      sock.once('close', () => this.sockets.delete(sock));
    });
    // h2 is node's HTTP/2 session; a connection that chose MUX_ALPN is the raw lane's. node's HTTP/2
    // server sets its own ALPN list (h2 only) from its options: the lane's protocol is added after.
    const alpn: { ALPNProtocols?: unknown } = {};
    (tls as unknown as { convertALPNProtocols(p: string[], out: object): void }).convertALPNProtocols(['h2', MUX_ALPN], alpn);
    const offered = server as unknown as { ALPNProtocols?: unknown };
    if (!Buffer.isBuffer(offered.ALPNProtocols)) throw new Error("node's HTTP/2 server keeps no ALPN list where the channel can add the raw lane's protocol");
    offered.ALPNProtocols = alpn.ALPNProtocols;
    const raw = (this.raw = this.rawOwner());
    const h2 = server.listeners('secureConnection')[0] as (s: TLSSocket) => void;
    server.removeAllListeners('secureConnection');
    const take = (sock: TLSSocket) => (sock.alpnProtocol === 'h2' ? h2.call(server, sock) : raw.accept(sock, this.peerOf(sock) ?? ''));
    server.on('secureConnection', (sock: TLSSocket) => {
      const admit = this.d.admit;
      if (!admit) return take(sock);
      const host = this.peerOf(sock) ?? '';
      // bytes the peer sends meanwhile wait in the socket's buffer (the session or lane reads them when it starts)
      const quiet = () => {};
      sock.on('error', quiet);
      void admit.admit(host, peerKey(sock)).then((ok) => {
        sock.off('error', quiet);
        if (sock.destroyed) return;
        if (ok) return take(sock);
        this.d.log.warn('channel refused a peer: not a registered host with its registered key', { ip: sock.remoteAddress, host });
        sock.destroy();
      });
    });
    server.on('sessionError', () => {});
    server.on('session', (s) => {
      this.sessions.add(s);
      s.setLocalWindowSize(SESSION_WINDOW);
      s.on('close', () => this.sessions.delete(s));
    });
    server.on('tlsClientError', (err, sock) => this.d.log.info('channel refused a connection', { ip: sock.remoteAddress, detail: err.message }));
    const at = address.lastIndexOf(':');
    const host = address.slice(0, at).replace(/^\[|\]$/g, '');
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error) => reject(AppError.of('listen_failed', `cannot listen on ${address} (cluster.listen): ${e.message}`));
      server.once('error', onError);
      server.listen(Number(address.slice(at + 1)), host, () => {
        server.off('error', onError);
        resolve();
      });
    });
    return (server.address() as AddressInfo).port;
  }

  /** A peer's CONTACT_ASK: when this host last reached the registry having heard that peer. */
  private vouch(stream: ServerHttp2Stream): void {
    stream.on('error', () => {});
    const peer = this.peerOf(stream.session?.socket) ?? '';
    const ago = peer ? this.d.vouch?.(peer) : undefined;
    try {
      stream.respond({ ':status': 200, [REGISTRY_AGO]: String(ago === undefined ? -1 : Math.round(ago)) }, { endStream: true });
    } catch {
      // the stream closed meanwhile
    }
  }

  /** A new certificate (reissued before the old one ends) for the connections from now on. */
  renew(): void {
    const me = this.d.identity();
    this.server?.setSecureContext({ ca: me.ca, cert: me.cert, key: me.key });
  }

  /** The raw lane's owner side. */
  private rawOwner(): RawOwner {
    const lane = this.d.local.lane;
    return new RawOwner({
      // a server moving off this host: the full path, which waits for the move's end
      lane: lane && ((r, sock, info, done) => (this.d.hold?.(info.host) ? false : lane.call(this.d.local, r, sock, info, done))),
      refusal: (peer, claim, info) => {
        const refused = this.refusal(peer, claim, info);
        if (refused === 'not-here')
          this.d.log.debug('not here: the sender routed by a stale placement', { site: info.host, server: claim.server, rid: info.requestId });
        return refused;
      },
      maxPerPeer: RAW_PER_PEER,
      idleMs: RAW_IDLE_MS,
      clock: this.d.clock,
    });
  }

  private onRequest(req: Req, res: Res): void {
    req.on('error', () => {});
    res.on('error', () => {});
    const h = req.headers;
    // an HTTP/2 stream of a session
    const stream = 'stream' in req ? req.stream : undefined;
    const info: RequestInfo = {
      host: one(h[H.site]) ?? '',
      scheme: one(h[H.scheme]) === 'http' ? 'http' : 'https',
      requestId: one(h[H.rid]) ?? '',
      ip: one(h[H.ip]) ?? '',
    };
    if (stream && h[H.api] === '1' && this.d.api)
      return answerApi(this.d.api, req as Http2ServerRequest, res as Http2ServerResponse, info, this.peerOf(stream.session?.socket));
    // its server moving off this host: checked once the move ended (then "not here": the sender asks the registry again)
    const held = this.d.hold?.(info.host);
    if (held) return void held.then(() => this.onRequest(req, res));
    const upgrade = stream ? one(h[H.upgrade]) : undefined;
    const refuse = (err: AppError) => {
      if (upgrade && stream) {
        res.writeHead(200);
        return rawError(new StreamSocket(req as Http2ServerRequest, stream, info.ip), err, { requestId: info.requestId });
      }
      res.setHeader('x-request-id', info.requestId);
      sendReply(res, errorReply(err, info.requestId, this.d.log));
    };
    const peer = this.peerOf(stream ? stream.session?.socket : req.socket) ?? '';
    const refused = this.refusal(peer, claimOf(h), info);
    if (refused === 'loop') {
      this.d.log.warn('forwarding loop refused', { from: peer, hops: h[H.hops], rid: info.requestId });
      return refuse(AppError.of('forward_loop', `the request came back to ${this.d.identity().host}, which it had passed already (request ${info.requestId})`));
    }
    if (refused) {
      this.d.log.debug('not here: the sender routed by a stale placement', { site: info.host, server: one(h[H.server]), rid: info.requestId });
      return void res.writeHead(NOT_HERE, { [H.notHere]: '1' }).end();
    }
    dropOwn(req);
    if (upgrade) return this.tunnel(req as Http2ServerRequest, res as Http2ServerResponse, info, upgrade);
    try {
      const pending = this.d.local.handle(req, res, info);
      if (pending) pending.catch((err: unknown) => sendReply(res, errorReply(err, info.requestId, this.d.log)));
    } catch (err) {
      sendReply(res, errorReply(err, info.requestId, this.d.log));
    }
  }

  /** Why a forwarded request is not answered here: a loop, or not this host's server at that epoch. */
  private refusal(peer: string, claim: Claim, info: RequestInfo): 'loop' | 'not-here' | undefined {
    if (peer === this.d.identity().host || claim.hops > MAX_HOPS) return 'loop';
    const slug = info.host.slice(0, info.host.indexOf('.'));
    const mine = this.d.servers.bySlug(slug);
    const placed = mine && this.d.placements.byServer(mine.id);
    if (!mine || mine.id !== claim.server || (placed && (placed.host !== this.d.identity().host || placed.epoch !== claim.epoch))) return 'not-here';
    // a server's own domain: still attached and active here (detached on this host, another host's map may lag)
    if (claim.alias !== undefined && this.d.aliases?.(claim.alias) !== slug) return 'not-here';
    return undefined;
  }

  /** The host a connection's verified certificate names, read once per connection (decoding it per request costs). */
  private peerOf(socket: TLSSocket | Socket | undefined): string | undefined {
    if (!socket) return undefined;
    let host = this.peers.get(socket);
    if (host === undefined) this.peers.set(socket, (host = peerHost((socket as TLSSocket).getPeerCertificate()) ?? ''));
    return host;
  }

  /** A WebSocket handshake: the stream is the client's socket from here on. */
  private tunnel(req: Http2ServerRequest, res: Http2ServerResponse, info: RequestInfo, upgrade: string): void {
    res.writeHead(200);
    const socket = new StreamSocket(req, req.stream, info.ip);
    socket.on('error', () => {});
    const host = one(req.headers[':authority']) ?? info.host;
    const upgradeApp = this.d.local.upgrade;
    if (!upgradeApp) return rawError(socket, AppError.of('upgrade_not_supported', 'only WebSocket upgrades are forwarded'), { requestId: info.requestId });
    upgradeApp.call(this.d.local, handshakeOf(req, socket, upgrade, host), socket, Buffer.alloc(0), {
      ...info,
      slug: info.host.slice(0, info.host.indexOf('.')),
    });
  }

  async close(): Promise<void> {
    const s = this.server;
    if (!s?.listening) return;
    const closed = new Promise<void>((r) => s.close(() => r()));
    // kept-alive sessions get a GOAWAY: streams under way finish, the senders open no more on them
    for (const x of this.sessions) x.close();
    this.raw?.close(false);
    await Promise.race([closed, new Promise<void>((r) => setTimeout(r, CLOSE_GRACE_MS).unref())]);
    for (const x of this.sessions) x.destroy();
    // a session closed by its GOAWAY whose peer still holds a stream it has not read keeps its socket half-open
    for (const x of this.sockets) x.destroy();
    this.raw?.close(true);
    await closed;
  }
}
