// The <slug>.{domain} app: finds the server, then either serves its /root/www (no run.sh; never
// wakes it) or forwards to its app on port 80, holding the request (bounded count, time and
// buffered body) while a sleeping server wakes and its app starts listening (waking.ts). WebSocket upgrades
// take the same path and keep the server awake for as long as they are open.

import type { IncomingMessage } from 'node:http';
import type { Duplex, Readable } from 'node:stream';
import type { ProxyConfig } from '../config/index.js';
import { AppError, errorFields } from '../errors.js';
import {
  rawError,
  type HelloApp,
  type HttpApp,
  type LaneApp,
  type LaneExchange,
  type LaneOutcome,
  type LaneRequest,
  type Req,
  type RequestInfo,
  type Res,
} from '../http/index.js';
import type { Logger } from '../log/index.js';
import { EgressMeter } from '../billing/index.js';
import { PublicUrls } from '../pages/index.js';
import type { IdleTracker } from '../presence/index.js';
import type { Forwarder, ForwardFailure, Upstream } from './forward.js';
import type { DirectExchange } from './direct.js';
import { sendErrorPage } from './pages.js';
import type { Publication } from './publish.js';
import type { Site, Sites } from './sites.js';
import { serveStatic } from './static.js';
import { Waking } from './waking.js';

export interface ProxyAppDeps {
  sites: Sites;
  presence: Pick<
    IdleTracker,
    'wake' | 'hold' | 'connection' | 'touch' | 'needsWake' | 'startingUntil' | 'isDozing' | 'thawIfDozing' | 'thawsAtOnce' | 'dozeOf'
  >;
  publication: Publication;
  forwarder: Forwarder;
  cfg: Pick<ProxyConfig, 'wakeTimeout' | 'appStartGrace' | 'holdLimit' | 'holdBodyLimit'>;
  log: Logger;
  /** Bytes sent to clients on behalf of a server (billed as its egress). */
  egress?: (serverId: string, bytes: number) => void;
  /** How clients reach the hosting API, for links in pages (default: as this request reached us). */
  urls?: PublicUrls;
}

const unknown = (slug: string) => AppError.of('unknown_server', `no server is named ${slug.slice(0, 63)}`);
const suspended = (site: Site, api: string) =>
  site.suspendedByOperator
    ? AppError.of('server_suspended', "this server is paused by the host's operator", {
        extra: { hint: "The owner can ask the host's operator to resume it.", suspended_by: 'operator' },
      })
    : AppError.of('server_suspended', 'this server is paused because its account ran out of credit', {
        extra: { hint: 'The owner can add credit or verify a phone to bring it back.', suspended_by: 'billing', upgrade_url: `${api}/account/recharge` },
      });

/** How long a TLS hello's thaw keeps the spare connection for the request after the handshake. */
const HELLO_SPARE_MS = 1000;

export class ProxyApp implements HttpApp, LaneApp, HelloApp {
  private readonly waking: Waking;
  /** Counts what answers, static or forwarded, and WebSockets send to their clients. */
  private readonly meter: EgressMeter | undefined;

  private readonly urls: PublicUrls;
  /** Where each server's requests last went (its app's address): a doze's spare connection goes there. */
  private readonly upstreams = new Map<string, Upstream>();
  /** Servers a TLS hello thawed, whose spare waits for the request after the handshake until the timer. */
  private readonly helloKeeps = new Map<string, NodeJS.Timeout>();

  constructor(private readonly d: ProxyAppDeps) {
    if (d.egress) this.meter = new EgressMeter(d.egress);
    this.urls = d.urls ?? new PublicUrls();
    this.waking = new Waking(d);
  }

  /** Origin of the hosting API (api.{domain}) as the client reaches this daemon. */
  private api(req: Req, info: RequestInfo): string {
    return this.urls.origin(req, info.scheme, `api.${info.host.slice(info.host.indexOf('.') + 1)}`);
  }

  /** Answers one request; synchronous when the server is awake and its app known to listen. */
  handle(req: Req, res: Res, info: RequestInfo): Promise<void> | void {
    if (info.failure) return sendErrorPage(req, res, info.failure, info.requestId, this.api(req, info));
    const slug = info.host.slice(0, info.host.indexOf('.'));
    const site = this.d.sites.lookup(slug);
    if (!site) return sendErrorPage(req, res, unknown(slug), info.requestId, this.api(req, info));
    if (site.suspended) return sendErrorPage(req, res, suspended(site, this.api(req, info)), info.requestId, this.api(req, info));
    const app = this.d.publication.knownApp(site.id);
    if (app === undefined) return this.checked(req, res, info, site);
    return app ? this.toApp(req, res, info, site) : this.static(req, res, info, site);
  }

  /**
   * A lane request (edge/lane.ts: a bodiless GET or HEAD) to a server with an app is answered
   * here, on the client's connection: at once when the app is up, else after the same wake or
   * wait as any request (its failure is answered by node's server as a page: replay). A server
   * that is unknown, paused or has no app (static files) is not the lane's (false).
   */
  lane(r: LaneRequest, sock: Duplex, info: RequestInfo & { slug: string }, done: (o: LaneOutcome) => void): LaneExchange | false {
    const { sites, presence, publication } = this.d;
    const site = sites.lookup(info.slug);
    const app = site && !site.suspended ? publication.knownApp(site.id) : false;
    if (!site || app === false) return false;
    if (app && this.upNow(site.id)) return this.direct(r, sock, info, site, presence.hold(site.id), done);
    // a dozing server: its thaw, and the forward at once, when run.sh is known to be there (a fresh
    // look, or the one made during this doze); else (no such look, or one that found none: run.sh
    // may have come since, from the host's side) the usual path looks again first
    const thawed = (app ?? publication.knownWhileDozing(site.id, presence.dozeOf(site.id))) && this.thawed(r, sock, info, site, done);
    if (thawed) return thawed;
    const waiting: LaneExchange & { ex?: LaneExchange } = { clientGone: () => waiting.ex?.clientGone() };
    // whatever fails on the way ends the request (node's server answers it) and gives the hold back
    let over = false;
    const once = (o: LaneOutcome) => void (over || ((over = true), done(o)));
    const hold = { release: undefined as (() => void) | undefined };
    this.laneWaited(r, sock, info, site, once, waiting, hold).catch((e: unknown) => {
      hold.release?.();
      this.d.log.error('lane request failed', { requestId: info.requestId, err: e });
      once({ kind: 'replay', failure: AppError.of('internal', `the request failed inside the host (request ${info.requestId})`) });
    });
    return waiting;
  }

  /**
   * A TLS client named this server's host (SNI): a dozing server whose app listened when it froze
   * and has run.sh is thawed now, so its thaw overlaps the rest of the handshake and the request
   * after it finds the server awake. Nothing else is done for a name alone (a stopped server is
   * started for a request, not a ClientHello; a thawed server no request reaches dozes again after
   * idleTimeout, as after any request).
   */
  hello(slug: string): void {
    const { sites, presence, publication } = this.d;
    const site = sites.lookup(slug);
    if (!site || site.suspended) return;
    if (!(publication.knownApp(site.id) ?? publication.knownWhileDozing(site.id, presence.dozeOf(site.id)))) return;
    // its spare connection is kept for the request after the handshake, for a while
    this.endHelloKeep(site.id);
    this.helloKeeps.set(site.id, setTimeout(() => (this.helloKeeps.delete(site.id), this.awoke(site.id)), HELLO_SPARE_MS).unref());
    this.thawNow(site)?.catch((e: unknown) => this.d.log.warn('a thaw at a TLS hello failed', { server: site.id, err: errorFields(e) }));
  }

  /** Begins the thaw of a dozing server whose app listened when it froze (its kept-alive
   *  connections from before the freeze dropped); undefined for any other server. */
  private thawNow(site: Site): Promise<void> | undefined {
    const { presence, publication, forwarder } = this.d;
    if (this.waking.isWarming(site.id) || !publication.isReady(site.id)) return undefined;
    const doze = presence.dozeOf(site.id);
    const thawing = presence.thawIfDozing(site.id);
    if (!thawing) return undefined;
    publication.thawed(site.id, doze);
    forwarder.dropIdle(site.upstream); // kept alive before the freeze: the app may be closing them now
    this.waking.woke(site.id);
    return thawing;
  }

  /**
   * A dozing server whose app listened when it froze and has run.sh (a fresh look, or one made
   * during this doze): thawed, and the request forwarded right after the thaw's cgroup write, in
   * the same call, without wake()'s wait machinery (held count, wake deadline, `waking` state: a
   * thaw is one write) or a promise's turn in between. Its own connection is the check that the
   * app still listens (refused: replayed, node's server waits for the app); a thaw that failed
   * ends the request with its error. Undefined for any other server (a wake or freeze under way,
   * other work queued for it in the runtime, a cold start, an app not known to listen): the usual
   * path, which waits for the thaw.
   */
  private thawed(r: LaneRequest, sock: Duplex, info: RequestInfo, site: Site, done: (o: LaneOutcome) => void): LaneExchange | undefined {
    if (!this.d.presence.thawsAtOnce(site.id)) return undefined;
    const thawing = this.thawNow(site);
    if (!thawing) return undefined;
    let ex: DirectExchange | undefined;
    // a thaw that failed leaves the app frozen: the request is answered with why, not left to time out
    thawing.catch((e: unknown) => ex?.abandon(e instanceof AppError ? e : this.wakeFailed(site, e, info.requestId)));
    ex = this.direct(r, sock, info, site, this.d.presence.hold(site.id), done);
    return ex;
  }

  private async laneWaited(
    r: LaneRequest,
    sock: Duplex,
    info: RequestInfo,
    site: Site,
    done: (o: LaneOutcome) => void,
    waiting: { ex?: LaneExchange },
    hold: { release?: () => void },
  ): Promise<void> {
    // run.sh was not looked at lately: a server without one is served its files by node's server.
    // A dozing server that had one is thawed while the look is made (its answer is awaited before
    // the request goes to the app); any other server is woken only once the look found one.
    const { publication, presence } = this.d;
    let look = publication.knownApp(site.id) === undefined ? publication.hasApp(site.id, site.rootfs) : undefined;
    look?.catch(() => {}); // awaited below, maybe after the wake
    if (look && !(publication.hadApp(site.id) && presence.isDozing(site.id))) {
      if (!(await look)) return done({ kind: 'replay' });
      look = undefined;
    }
    const held = presence.hold(site.id);
    const release = (hold.release = () => {
      hold.release = undefined;
      held();
    });
    try {
      await this.waking.ready(site, undefined);
    } catch (e) {
      release();
      return done({ kind: 'replay', failure: e instanceof AppError ? e : this.wakeFailed(site, e, info.requestId) });
    }
    if (look && !(await look)) {
      release();
      return done({ kind: 'replay' }); // run.sh went away while it dozed: its files are served
    }
    if (sock.destroyed) {
      release();
      return done({ kind: 'cut' });
    }
    waiting.ex = this.direct(r, sock, info, site, release, done);
  }

  private direct(r: LaneRequest, sock: Duplex, info: RequestInfo, site: Site, release: () => void, done: (o: LaneOutcome) => void): DirectExchange {
    this.upstreams.set(site.id, site.upstream);
    try {
      return this.d.forwarder.direct(r, sock, site.upstream, info, {
        serverId: site.id,
        release,
        meter: this.meter,
        onFailure: this.failed,
        appAway: () => this.d.publication.markDown(site.id), // the full path, replaying it, waits
        done,
        log: this.d.log,
      });
    } catch (e) {
      release(); // the hold is given back whatever failed (the caller answers the request)
      throw e;
    }
  }

  /** Whether the server has an app was not known a moment ago: look, then go on. */
  private async checked(req: Req, res: Res, info: RequestInfo, site: Site): Promise<void> {
    return (await this.d.publication.hasApp(site.id, site.rootfs)) ? this.toApp(req, res, info, site) : this.static(req, res, info, site);
  }

  /** Forwards at once to an app that is up; waits first for one that sleeps or is starting. */
  private toApp(req: Req, res: Res, info: RequestInfo, site: Site): Promise<void> | void {
    if (!this.upNow(site.id)) return this.waited(req, res, info, site);
    this.forward(req, res, info, site, this.d.presence.hold(site.id), undefined, true);
  }

  /** The server's app takes requests now: no wake, warm-up or port wait first. */
  private upNow(id: string): boolean {
    return !this.waking.isWarming(id) && !this.d.presence.needsWake(id) && this.d.publication.isReady(id);
  }

  private static(req: Req, res: Res, info: RequestInfo, site: Site): Promise<void> {
    this.meter?.answer(res, site.id);
    return serveStatic(req, res, site, info.requestId, this.api(req, info));
  }

  /** The server sleeps, wakes or its app is starting: hold the request until it can answer. */
  private async waited(req: Req, res: Res, info: RequestInfo, site: Site, retry = true): Promise<void> {
    const release = this.d.presence.hold(site.id);
    let body: Readable | undefined;
    try {
      body = await this.waking.ready(site, req);
    } catch (e) {
      release();
      return sendErrorPage(req, res, e instanceof AppError ? e : this.wakeFailed(site, e, info.requestId), info.requestId, this.api(req, info));
    }
    if ((res as { destroyed?: boolean }).destroyed) return release();
    this.forward(req, res, info, site, release, body, retry);
  }

  /**
   * `retry`: when the app goes away before answering (replaced or restarting: its port is briefly
   * refused), the request waits for it (appStartGrace) and is forwarded again, once.
   */
  private forward(req: Req, res: Res, info: RequestInfo, site: Site, release: () => void, body: Readable | undefined, retry: boolean): void {
    if (retry) this.meter?.answer(res, site.id); // the second forward's answer is already counted
    this.upstreams.set(site.id, site.upstream);

    const appAway = retry
      ? () => {
          this.d.publication.markDown(site.id);
          void this.waited(req, res, info, site, false);
        }
      : undefined;
    this.d.forwarder.web(req, res, site.upstream, info, { serverId: site.id, body, onFailure: this.failed, appAway, onDone: release });
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo & { slug: string }): void {
    void this.upgradeAsync(req, socket, head, info).catch((e) => {
      this.d.log.error('upgrade failed', { err: e });
      socket.destroy();
    });
  }

  private async upgradeAsync(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo & { slug: string }): Promise<void> {
    const site = this.d.sites.lookup(info.slug);
    const rid = { requestId: info.requestId };
    if (!site) return rawError(socket, unknown(info.slug), rid);
    if (site.suspended) return rawError(socket, suspended(site, this.api(req, info)), rid);
    if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
      return rawError(socket, AppError.of('upgrade_not_supported', 'only WebSocket upgrades are forwarded'), rid);
    }
    if (!(await this.d.publication.hasApp(site.id, site.rootfs))) {
      return rawError(socket, AppError.of('no_app', 'WebSockets need an app: an executable /root/run.sh serving on 0.0.0.0:80'), rid);
    }
    // an open WebSocket: no stop while open; quiet for the idle timeout, the server may doze (presence)
    const release = this.d.presence.connection(site.id, () => (socket as Duplex & { bytesWritten?: number }).bytesWritten ?? 0);
    socket.once('close', release);
    try {
      await this.waking.ready(site, req);
    } catch (e) {
      const err = e instanceof AppError ? e : this.wakeFailed(site, e, info.requestId);
      return rawError(socket, err, rid);
    }
    if (socket.destroyed) return;
    this.meter?.socket(socket, site.id);
    this.upstreams.set(site.id, site.upstream);
    socket.pause(); // the forwarder's pipe resumes it: the listener below takes no byte from it
    socket.on('data', () => this.d.presence.touch(site.id)); // the client's bytes thaw a dozing server
    this.d.forwarder.ws(req, socket, head, site.upstream, info, site.id, this.failed);
  }

  /**
   * The server dozes: when its app listened, a connection to it is opened now (the kernel
   * completes it while the app is frozen) for the request that will thaw it (pool.ts spare).
   */
  dozed(id: string): void {
    this.endHelloKeep(id); // a hello's keep ends with the doze after it
    const up = this.upstreams.get(id);
    if (up && this.d.publication.isReady(id)) this.d.forwarder.spare(up);
  }

  /** The server was thawed or stopped: a spare connection no request took is closed (a
   *  single-threaded app would otherwise wait on it), unless a TLS hello's thaw keeps it for the
   *  request after the handshake (hello). After the lane's own thaw it is taken already. */
  awoke(id: string): void {
    if (this.helloKeeps.has(id)) return;
    const up = this.upstreams.get(id);
    if (up) this.d.forwarder.dropSpare(up);
  }

  private endHelloKeep(id: string): void {
    clearTimeout(this.helloKeeps.get(id));
    this.helloKeeps.delete(id);
  }

  /** A deleted server: its spare closed, its address forgotten. */
  forget(id: string): void {
    this.endHelloKeep(id);
    this.awoke(id);
    this.upstreams.delete(id);
  }

  /** A forward that got no answer marks the app down, so the next request probes it first. */
  private readonly failed = (serverId: string, f: ForwardFailure): void => {
    if (f === 'refused' || f === 'timeout') this.d.publication.markDown(serverId);
  };

  /** A wake that failed inside the host: the log gets why (command, stderr, stack), the visitor a generic page. */
  private wakeFailed(site: Site, e: unknown, requestId: string): AppError {
    this.d.log.error('wake failed', { server: site.id, rid: requestId, err: errorFields(e) });
    return AppError.of('wake_failed', 'the server could not be started', { cause: e, retryAfter: 5 });
  }
}
