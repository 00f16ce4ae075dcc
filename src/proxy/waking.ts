// Waking a server for the requests that reach it (proxy/app.ts): one wake and one wait for its
// app shared by every request that arrives meanwhile, each held (a bounded count per server, its
// body buffered up to holdBodyLimit) until the app answers on port 80 or wakeTimeout passes; an
// app just started or woken is given appStartGrace to listen.

import type { Readable } from 'node:stream';
import { PassThrough } from 'node:stream';
import { AppError } from '../errors.js';
import type { Req } from '../http/index.js';
import type { ProxyConfig } from '../config/index.js';
import type { IdleTracker } from '../presence/index.js';
import type { Forwarder } from './forward.js';
import type { Publication } from './publish.js';
import type { Site } from './sites.js';

function hasBody(req: Req): boolean {
  const len = req.headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
  return stream ? stream.endAfterHeaders === false : false;
}

export interface WakingDeps {
  presence: Pick<IdleTracker, 'wake' | 'needsWake' | 'isDozing' | 'startingUntil'>;
  publication: Pick<Publication, 'isReady' | 'markDown' | 'waitReady'>;
  cfg: Pick<ProxyConfig, 'wakeTimeout' | 'appStartGrace' | 'holdLimit' | 'holdBodyLimit'>;
  forwarder: Pick<Forwarder, 'dropIdle'>;
}

export class Waking {
  private readonly held = new Map<string, number>();
  private readonly warming = new Map<string, Promise<boolean>>();
  private readonly wokeAt = new Map<string, number>();

  constructor(private readonly d: WakingDeps) {}

  /** Whether a wake of the server (and the wait for its app) is under way. */
  isWarming(id: string): boolean {
    return this.warming.has(id);
  }

  /** The server was woken now by another path (a thaw): its app's grace counts from now. */
  woke(id: string): void {
    this.wokeAt.set(id, Date.now());
  }

  /**
   * Makes sure the app can answer: wakes a sleeping server (holding the request, its body read
   * into memory up to holdBodyLimit) or waits briefly for an app that is starting. Returns the
   * buffered body stream when one was made.
   */
  async ready(site: Site, req: Req | undefined): Promise<Readable | undefined> {
    const { presence, publication, cfg } = this.d;
    let warming = this.warming.get(site.id);
    if (!warming && !presence.needsWake(site.id)) {
      if (publication.isReady(site.id)) return undefined;
      // Just started (by SSH, a port, a restart) or run.sh just appeared: give the app its time.
      const deadline = Math.max(Date.now() + cfg.appStartGrace, (this.wokeAt.get(site.id) ?? 0) + cfg.wakeTimeout);
      if (await publication.waitReady(site.id, site.upstream, deadline)) return undefined;
      throw AppError.of('app_down', 'the app of this server is not accepting connections on port 80', {
        extra: { hint: '/root/run.sh exists but nothing listens on 0.0.0.0:80; see /var/log/run.sh.log on the server.' },
      });
    }
    const n = this.held.get(site.id) ?? 0;
    if (n >= cfg.holdLimit) {
      throw AppError.of('wake_queue_full', 'too many requests are waiting for this server to wake', { retryAfter: 2 });
    }
    this.held.set(site.id, n + 1);
    let body: PassThrough | undefined;
    if (req && hasBody(req)) {
      body = new PassThrough({ highWaterMark: Math.max(16 * 1024, cfg.holdBodyLimit / 2) });
      req.on('error', (e) => body!.destroy(e));
      (req as Readable).pipe(body);
    }
    try {
      warming ??= this.warm(site);
      if (await warming) return body;
      body?.destroy();
      throw AppError.of('wake_timeout', `the server did not start answering on port 80 within ${Math.round(cfg.wakeTimeout / 1000)} s of waking`, {
        extra: { hint: 'Its /root/run.sh must start a server bound to 0.0.0.0:80; see /var/log/run.sh.log on the server.' },
      });
    } catch (e) {
      body?.destroy();
      throw e;
    } finally {
      const m = (this.held.get(site.id) ?? 1) - 1;
      if (m <= 0) this.held.delete(site.id);
      else this.held.set(site.id, m);
    }
  }

  /** One wake of a server and the wait for its app, shared by every request that arrives meanwhile. */
  private warm(site: Site): Promise<boolean> {
    const { presence, publication, cfg, forwarder } = this.d;
    const deadline = Date.now() + cfg.wakeTimeout;
    const p = (async () => {
      // only a thaw: the app's port and sockets outlived the freeze, so what was known of it holds
      // and the request goes at once — its own connection is the check (refused: the app is
      // marked down and the request waits for it, appAway). A cold start is probed.
      const thaw = presence.isDozing(site.id);
      if (!thaw) publication.markDown(site.id);
      const woke = await withDeadline(presence.wake(site.id), deadline);
      if (!woke) return false;
      this.wokeAt.set(site.id, Date.now());
      if (thaw) forwarder.dropIdle(site.upstream); // kept alive before the freeze: the app may be closing them now
      return publication.waitReady(site.id, site.upstream, deadline);
    })().finally(() => this.warming.delete(site.id));
    this.warming.set(site.id, p);
    presence.startingUntil(site.id, p); // the server shows `waking` until its app answers
    return p;
  }
}

/** Resolves true when `p` settles in time, false at the deadline; rejections pass through. */
function withDeadline(p: Promise<unknown>, deadline: number): Promise<boolean> {
  let t: NodeJS.Timeout;
  const timeout = new Promise<false>((resolve) => (t = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now()))));
  return Promise.race([p.then(() => true), timeout]).finally(() => clearTimeout(t));
}
