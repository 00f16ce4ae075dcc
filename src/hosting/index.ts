// Hosting API (api.{domain} and {domain}): the routes of spec/hosting-service.md with the
// decisions of DESIGN.md part 2. Every route but /create, /feedback, /healthz and /openapi.json
// needs `Authorization: Bearer <api_key>`. Requests are rate-limited per IP and per key.

import { AppError } from '../errors.js';
import { Router, validate, type Ctx, type Handler, type Reply } from '../http/index.js';
import { RateLimiter } from '../ratelimit.js';
import type { AccountRecord } from '../store/index.js';
import { tierOf } from './accounts.js';
import { buildCore, type HostingCore, type HostingDeps } from './core.js';
import { handleCreate } from './create.js';
import { feedbackHandler } from './feedback.js';
import { hostingOpenApi } from './openapi.js';
import { ExposeRequest } from './schemas.js';
import { recharge, rechargeInfo } from './recharge.js';

export const HOSTING_SERVICE = 'rootbox';
export type { HostingDeps, HostingCore } from './core.js';
export type { Credits, KeyPair } from './servers.js';
export type { PortListener } from './expose.js';
export { TIER_LIMITS, tierOf, type Tier } from './accounts.js';

function limited(v: { ok: boolean; retryAfter: number }, what: string): void {
  if (!v.ok) throw new AppError('rate_limited', 'rate_limited', `too many requests from this ${what}; retry in ${v.retryAfter} s`, { headers: { 'retry-after': String(v.retryAfter) } });
}

export interface HostingApi {
  router: Router;
  core: HostingCore;
}

export function createHostingService(deps: HostingDeps): HostingApi {
  const core = buildCore(deps);
  const rl = deps.cfg.hosting.rateLimit;
  const perIp = new RateLimiter({ burst: rl.perIpPerMinute, perSecond: rl.perIpPerMinute / 60 });
  const perKey = new RateLimiter({ burst: rl.perKeyPerMinute, perSecond: rl.perKeyPerMinute / 60 });
  const creates = new RateLimiter({ burst: rl.createsPerIpPerHour, perSecond: rl.createsPerIpPerHour / 3600 });

  const open = (h: Handler): Handler => (ctx) => {
    limited(perIp.take(ctx.ip), 'address');
    return h(ctx);
  };
  const authed = (h: (ctx: Ctx, account: AccountRecord) => Promise<Reply> | Reply): Handler => (ctx) => {
    limited(perIp.take(ctx.ip), 'address');
    const account = core.accounts.authenticate(ctx.req.headers.authorization);
    limited(perKey.take(account.id), 'api_key');
    return h(ctx, account);
  };
  const ok = { status: 200, body: { ok: true } };
  const base = (ctx: Ctx) => `${ctx.scheme}://${ctx.host}`;

  const router = new Router(deps.log)
    .on('GET', '/healthz', () => ({ status: 200, body: { ok: true, service: HOSTING_SERVICE } }))
    .on('GET', '/openapi.json', (ctx) => ({ status: 200, body: hostingOpenApi(`${ctx.scheme}://${ctx.host}`) }))
    .on('POST', '/feedback', open(feedbackHandler(deps.store)), { bodyLimit: 16 * 1024 })
    .on('POST', '/create', open((ctx) => {
      limited(creates.take(ctx.ip), 'address (creates per hour)');
      return handleCreate(ctx, core);
    }), { bodyLimit: 16 * 1024 })
    // While the account is exhausted, read endpoints answer 402 with the upgrade envelope and,
    // beside it, what they would have answered: `servers`, `server` + `suspended`, `credits`.
    .on('GET', '/servers', authed(async (ctx, a) => {
      const servers = await Promise.all(core.servers.list(a).map((s) => core.servers.view(s, a)));
      core.assertNotExhausted(a, base(ctx), { servers });
      return { status: 200, body: { servers } };
    }))
    .on('GET', '/servers/:id', authed(async (ctx, a) => {
      const view = await core.servers.view(core.servers.owned(a, ctx.params.id), a);
      core.assertNotExhausted(a, base(ctx), { suspended: view.suspended, server: view });
      return { status: 200, body: view };
    }))
    .on('DELETE', '/servers/:id', authed(async (ctx, a) => {
      await core.servers.delete(core.servers.owned(a, ctx.params.id));
      return ok;
    }))
    .on('POST', '/servers/:id/restart', authed(async (ctx, a) => {
      const rec = core.servers.owned(a, ctx.params.id);
      await core.servers.restart(rec);
      return { status: 200, body: await core.servers.view(rec, a) };
    }))
    .on('GET', '/credits', authed((ctx, a) => {
      const credits = core.credits(a);
      core.assertNotExhausted(a, base(ctx), { credits });
      return { status: 200, body: credits };
    }))
    .on('GET', '/usage', authed((ctx, a) => ({ status: 200, body: deps.billing.usage(a, ctx.query.get('limit'), ctx.query.get('cursor')) })))
    .on('GET', '/account/recharge', authed((ctx, a) => rechargeInfo(ctx, deps.billing, a, deps.paywall)))
    .on('POST', '/account/recharge', authed((ctx, a) => recharge(ctx, deps.billing, a, deps.paywall)), { bodyLimit: 4096 })
    .on('POST', '/expose', authed(async (ctx, a) => {
      const body = validate(ExposeRequest, await ctx.json());
      core.servers.owned(a, body.server);
      return { status: 200, body: await core.exposures.expose(a, body.server, body.port) };
    }), { bodyLimit: 4096 })
    .on('DELETE', '/expose', authed(async (ctx, a) => {
      const body = validate(ExposeRequest, await ctx.json());
      core.servers.owned(a, body.server);
      await core.exposures.unexpose(body.server, body.port);
      return ok;
    }), { bodyLimit: 4096 })
    .on('POST', '/account/rotate-key', authed((_ctx, a) => ({ status: 200, body: { api_key: core.accounts.rotate(a), tier: tierOf(a) } })));
  return { router, core };
}

