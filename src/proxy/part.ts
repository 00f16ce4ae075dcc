// The proxy assembled (createProxy: the sites, run.sh's publication, the forwarder's pool and the
// app over them, with the idle tracker it is given or one of its own for tests and benchmarks) and
// the daemon's proxy part (main.ts's startProxy: over the store's records, the runtime, the
// daemon's idle tracker and billing's egress count).

import { proxySchema, type ProxyConfig } from '../config/index.js';
import type { HelloApp, HttpApp, LaneApp, UpgradeApp } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { PublicUrls, type PublicSettings } from '../pages/index.js';
import { IdleTracker } from '../presence/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import { ProxyApp } from './app.js';
import { Forwarder } from './forward.js';
import { Publication } from './publish.js';
import { storeSites, type ServerLookup, type Sites } from './sites.js';

export interface ProxyDeps {
  log: Logger;
  /** The proxy slice of the config; defaults apply when absent. */
  cfg?: ProxyConfig;
  /** Hosting records (slug → server). Without them (or without a runtime) every slug is unknown. */
  servers?: ServerLookup;
  runtime?: Pick<Runtime, 'start' | 'stop' | 'get' | 'list' | 'onThawed'>;
  /** Replaces the store + runtime lookup (tests, benchmarks). */
  sites?: Sites;
  /** The daemon's idle tracker (started and stopped by its own part). Without it the proxy
   *  makes one of its own over `runtime` and starts and stops it itself (tests, benchmarks). */
  presence?: IdleTracker;
  /** Told the bytes sent to clients for a server (app answers, WebSockets, static files): its billed egress. */
  egress?: (serverId: string, bytes: number) => void;
  /** How clients reach this daemon (config `public`), for links in pages; default: as each request reached it. */
  urls?: PublicUrls;
}

export interface Proxy extends HttpApp, UpgradeApp, Partial<LaneApp>, HelloApp {
  /** Wake / hold / touch / state: the idle tracker the proxy uses. */
  readonly presence: IdleTracker;
  /** running / sleeping / waking / … as it truly is now; undefined for an unknown id. */
  state(id: string): ServerState | undefined;
  /** Starts the idle checks of a tracker of its own. */
  start(): void;
  /** Forgets a deleted server (idle tracking, cached run.sh and port state). */
  forget(id: string): void;
  /** Whether the run.sh look made once the server dozed (its doze now, publish.ts lookAtDoze) is
   *  complete: what a test waits on before it asks what that look found. */
  lookedAtDoze(id: string): boolean;
  /** Stops the idle checks of a tracker of its own and closes kept-alive upstream connections. */
  stop(): Promise<void>;
}

const EMPTY_RUNTIME: Pick<Runtime, 'start' | 'stop' | 'get' | 'list'> = {
  start: async () => {},
  stop: async () => {},
  get: () => undefined,
  list: () => [],
};

export function createProxy(deps: ProxyDeps): Proxy {
  const cfg = deps.cfg ?? proxySchema.parse({});
  const sites = deps.sites ?? storeSites(deps.servers ?? { bySlug: () => undefined, get: () => undefined }, deps.runtime);
  const publication = new Publication({ checkInterval: cfg.publishCheckInterval });
  const own = !deps.presence;
  const tracker =
    deps.presence ??
    new IdleTracker({
      runtime: deps.runtime ?? EMPTY_RUNTIME,
      neverSleep: (id) => sites.neverSleep(id),
      idleTimeout: cfg.idleTimeout,
      checkInterval: cfg.idleCheckInterval,
      log: deps.log,
    });
  const forwarder = new Forwarder({
    connectTimeout: cfg.connectTimeout,
    upstreamTimeout: cfg.upstreamTimeout,
    maxSockets: cfg.maxSocketsPerServer,
    maxSocketsPerSource: cfg.maxSocketsPerSource,
    maxWaitingPerServer: cfg.maxWaitingPerServer,
    bodyIdleTimeout: cfg.bodyIdleTimeout,
    log: deps.log,
  });
  const app = new ProxyApp({ sites, presence: tracker, publication, forwarder, cfg, log: deps.log, egress: deps.egress, urls: deps.urls });
  tracker.onSleep((id) => (publication.markDown(id), app.awoke(id)));
  tracker.onDoze((id, doze) => (publication.lookAtDoze(id, doze), app.dozed(id)));
  deps.runtime?.onThawed?.((id) => app.awoke(id)); // every thaw: the tracker's, a stop's, a fence's
  return {
    handle: (req, res, info) => app.handle(req, res, info),
    upgrade: (req, socket, head, info) => app.upgrade(req, socket, head, info),
    // proxy.lane off: no lane requests; node's server reads every request
    lane: cfg.lane === 'on' ? (r, sock, info, done) => app.lane(r, sock, info, done) : undefined,
    hello: (slug) => app.hello(slug),
    presence: tracker,
    state: (id) => tracker.state(id),
    start: () => {
      if (own) tracker.start();
    },
    lookedAtDoze: (id) => publication.knownWhileDozing(id, tracker.dozeOf(id)) !== undefined,
    forget: (id) => {
      tracker.forget(id);
      publication.forget(id);
      app.forget(id);
      sites.forget?.(id);
    },
    async stop() {
      if (own) tracker.stop();
      forwarder.close();
    },
  };
}

/** The daemon's proxy part (main.ts): `<slug>.{domain}` over the store's records, the runtime and the daemon's idle tracker. */
export function startProxy(d: {
  cfg: { proxy: ProxyConfig; public: PublicSettings };
  store: { servers: ServerLookup };
  runtime: NonNullable<ProxyDeps['runtime']>;
  presence: IdleTracker;
  billing: { egress: NonNullable<ProxyDeps['egress']> };
  log: Logger;
}): Proxy {
  const urls = new PublicUrls(d.cfg.public);
  const proxy = createProxy({
    log: d.log.child({ part: 'proxy' }),
    cfg: d.cfg.proxy,
    servers: d.store.servers,
    runtime: d.runtime,
    presence: d.presence,
    egress: d.billing.egress,
    urls,
  });
  proxy.start();
  return proxy;
}
