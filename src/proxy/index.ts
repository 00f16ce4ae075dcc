// Public surface of the subdomain edge (<slug>.{domain}): static files from /root/www without a
// wake, forwarding to the app on port 80, WebSockets, sleep after idleTimeout and wake on demand.
// `presence` is what the SSH server and exposed TCP ports use to wake and keep servers awake;
// `state(id)` is the truthful running/sleeping/waking state for the hosting API.

import { proxySchema, type ProxyConfig } from '../config/index.js';
import type { HttpApp } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { Presence, Runtime, ServerState } from '../runtime/index.js';
import type { UpgradeApp } from '../edge/index.js';
import { ProxyApp } from './app.js';
import { Forwarder } from './forward.js';
import { IdleTracker } from './idle.js';
import { Publication } from './publish.js';
import { storeSites, type ServerLookup, type Sites } from './sites.js';

export interface ProxyDeps {
  log: Logger;
  /** The proxy slice of the config; defaults apply when absent. */
  cfg?: ProxyConfig;
  /** Hosting records (slug → server). Without them (or without a runtime) every slug is unknown. */
  servers?: ServerLookup;
  runtime?: Pick<Runtime, 'start' | 'stop' | 'get' | 'list'>;
  /** Replaces the store + runtime lookup (tests, benchmarks). */
  sites?: Sites;
  /** Told the bytes sent to clients for a server (app answers, WebSockets, static files): its billed egress. */
  egress?: (serverId: string, bytes: number) => void;
}

export interface Proxy extends HttpApp, UpgradeApp {
  /** Wake / hold / touch for the SSH server and exposed ports. */
  readonly presence: Presence;
  /** running / sleeping / waking / … as it truly is now; undefined for an unknown id. */
  state(id: string): ServerState | undefined;
  /** Starts the idle checks. */
  start(): void;
  /** Forgets a deleted server (idle tracking, cached run.sh and port state). */
  forget(id: string): void;
  /** Stops the idle checks and closes kept-alive upstream connections. */
  stop(): Promise<void>;
  /** The idle tracker itself (tests and benchmarks read its counters). */
  readonly tracker: IdleTracker;
}

const EMPTY_RUNTIME: Pick<Runtime, 'start' | 'stop' | 'get' | 'list'> = {
  start: async () => {},
  stop: async () => {},
  get: () => undefined,
  list: () => [],
};

export function createProxy(deps: ProxyDeps): Proxy {
  const cfg = deps.cfg ?? proxySchema.parse({});
  const runtime = deps.runtime ?? EMPTY_RUNTIME;
  const sites = deps.sites ?? storeSites(deps.servers ?? { bySlug: () => undefined, get: () => undefined }, deps.runtime);
  const publication = new Publication({ checkInterval: cfg.publishCheckInterval });
  const tracker = new IdleTracker({
    runtime,
    neverSleep: (id) => sites.neverSleep(id),
    idleTimeout: cfg.idleTimeout,
    checkInterval: cfg.idleCheckInterval,
    log: deps.log,
    onSleep: (id) => publication.markDown(id),
  });
  const forwarder = new Forwarder({
    connectTimeout: cfg.connectTimeout,
    upstreamTimeout: cfg.upstreamTimeout,
    maxSockets: cfg.maxSocketsPerServer,
    log: deps.log,
  });
  const app = new ProxyApp({ sites, presence: tracker, publication, forwarder, cfg, log: deps.log, egress: deps.egress });
  return {
    handle: (req, res, info) => app.handle(req, res, info),
    upgrade: (req, socket, head, info) => app.upgrade(req, socket, head, info),
    presence: tracker,
    tracker,
    state: (id) => {
      const st = tracker.state(id);
      return st === 'running' && app.isWarming(id) ? 'waking' : st;
    },
    start: () => tracker.start(),
    forget: (id) => {
      tracker.forget(id);
      publication.forget(id);
      sites.forget?.(id);
    },
    async stop() {
      tracker.stop();
      forwarder.close();
    },
  };
}

export { IdleTracker, type IdleOptions } from './idle.js';
export { storeSites, type Site, type Sites, type ServerLookup } from './sites.js';
export type { Upstream } from './forward.js';
