// The hosting API's service (api.{domain} and {domain}): the router over the core (core.ts) with
// every route declared in routes.ts, recharge.ts, feedback.ts and the MCP endpoint (mcp.ts), the
// OpenAPI document, the bearer api_key authentication, and the request-rate limits per source and
// per key, counted once: a request another host forwarded here as it came (elsewhere.ts) is
// counted here, one that host's routes counted already (RequestInfo.counted) is not. In cluster
// mode, requests on servers of other hosts go to them through the bound channel (elsewhere.ts).

import { documentOf, Router, type Authenticator, type HttpApp, type Step } from '../http/index.js';
import { PublicUrls } from '../pages/index.js';
import { tooMany, type Verdict } from '../ratelimit.js';
import { sourceKey } from '../slots.js';
import type { AccountRecord } from '../store/index.js';
import { buildCore, type HostingCore, type HostingDeps } from './core.js';
import { Elsewhere, type ServerForwarding } from './elsewhere.js';
import { execSocket, type ApiUpgrade } from './execsocket.js';
import { feedbackRoute } from './feedback.js';
import { mcpRoute } from './mcp.js';
import { rechargeRoutes } from './recharge.js';
import { hostingRoutes } from './routes.js';
import { SCHEMAS } from './schemas.js';
import { SharedRateLimit } from './quotas.js';

export const HOSTING_SERVICE = 'rootbox';

const INFO = {
  title: 'rootbox hosting API',
  version: '1.0.0',
  description: 'Root Linux servers on demand, each on its own HTTPS subdomain and reachable over SSH.',
};

function limit(limiter: SharedRateLimit, what: string, description: string): Step {
  const judge = (v: Verdict) => {
    if (!v.ok) throw tooMany('rate_limited', `too many requests from this ${what}`, v.retryAfter);
  };
  return {
    responses: { 429: description },
    run(ctx) {
      // a request another host sent here is counted here, by its client's source the channel carries,
      // unless that host's own routes counted it already (a create sent on, a part of a server list)
      if (ctx.forwarded && ctx.counted) return;
      // by source (an IPv4 address, an IPv6 /64): rotating addresses of one /64 is one source,
      // and costs one shared bucket, not one per address
      const v = limiter.take(sourceKey(ctx.ip));
      return 'ok' in v ? judge(v) : v.then(judge);
    },
  };
}

export interface HostingApi {
  router: Router<AccountRecord>;
  core: HostingCore;
  /** The API's requests as the edge hands them: those on another host's server go to it (cluster mode), the rest to the router. */
  handle: HttpApp['handle'];
  /** WebSocket upgrades on the API's hosts (exec over a WebSocket, execsocket.ts). */
  upgrade: ApiUpgrade['upgrade'];
  /** Cluster mode: the channel that reaches the hosts running the servers this host does not (main.ts, once it is up). */
  bindChannel(f: ServerForwarding): void;
}

export function createHostingService(deps: HostingDeps): HostingApi {
  const core = buildCore(deps);
  const rl = deps.cfg.hosting.rateLimit;
  // each limit counted on this host, then (cluster mode) in the registry for every host together
  const rate = (name: string, burst: number, perSecond: number) => new SharedRateLimit(name, { burst, perSecond }, deps.quotas, deps.log, deps.now);
  const perKey = rate('key', rl.perKeyPerMinute, rl.perKeyPerMinute / 60);
  const ipLimit = limit(rate('ip', rl.perIpPerMinute, rl.perIpPerMinute / 60), 'address', 'Too many requests from this address (see Retry-After).');
  const createLimit = limit(
    rate('create', rl.createsPerIpPerHour, rl.createsPerIpPerHour / 3600),
    'address (creates per hour)',
    'Too many creates from this address this hour (see Retry-After).',
  );
  const auth: Authenticator<AccountRecord> = {
    scheme: { name: 'bearer', doc: { type: 'http', scheme: 'bearer', description: 'api_key: rbx_ followed by 32 letters and digits' } },
    responses: {
      401: 'Missing, malformed, unknown or replaced api_key (missing_api_key, invalid_api_key, revoked_api_key).',
      429: 'Too many requests with this api_key or from this address (see Retry-After).',
    },
    async run(ctx) {
      const account = await core.accounts.authenticate(ctx.req.headers.authorization, ctx.ip);
      const v = ctx.forwarded && ctx.counted ? undefined : await perKey.take(account.id); // counted by the host it came through
      if (v && !v.ok) throw tooMany('rate_limited', 'too many requests with this api_key', v.retryAfter);
      return account;
    },
  };
  const router = new Router<AccountRecord>(deps.log, { auth });
  const elsewhere = new Elsewhere(deps.store.servers, deps.log.child({ part: 'apifwd' }), core.misses, deps.clock);
  const document = documentOf({ info: INFO, routes: () => router.routes, schemas: SCHEMAS, auth });
  router.add(
    ...hostingRoutes({ core, deps, service: HOSTING_SERVICE, ipLimit, createLimit, document, elsewhere }),
    ...rechargeRoutes(deps.billing, ipLimit, deps.paywall, deps.cfg),
    feedbackRoute(deps.store, ipLimit),
  );
  const urls = new PublicUrls(deps.cfg.public);
  router.add(
    mcpRoute({
      version: INFO.version,
      ipLimit,
      routes: () => router.routes,
      invoke: (r, call) => elsewhere.invoke((x, c) => router.invoke(x, c), r, call),
      origin: (ctx) => urls.origin(ctx.req, ctx.scheme, ctx.host),
    }),
  );
  const sockets = execSocket(core, (req, info) => urls.origin(req, info.scheme, info.host), deps.log);
  return {
    router,
    core,
    handle: (req, res, info) => elsewhere.handle(router, req, res, info),
    upgrade: (req, socket, head, info) => elsewhere.upgrade(sockets.upgrade, req, socket, head, info),
    bindChannel: (f) => elsewhere.bind(f),
  };
}
