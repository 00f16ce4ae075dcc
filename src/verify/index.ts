// Verification API (verify.{domain}): POST /v1/verify/{tier} paid with x402, and the free
// endpoints /v1/info, /v1/stats, /healthz, /.well-known/x402, /openapi.json. Order of checks on
// the paid route: tier (404) → body (400) → configured (503) → payment (402) → passes.

import { AppError } from '../errors.js';
import { Router, validate, type Ctx, type HttpApp, type Req, type RequestInfo, type Res } from '../http/index.js';
import type { Llm } from '../llm/index.js';
import type { Logger } from '../log/index.js';
import { PAYMENT_EXPOSE_HEADERS, type Paywall } from '../payments/index.js';
import { aggregate, quorum } from './aggregate.js';
import { serviceInfo, x402Manifest, type DiscoveryContext } from './discovery.js';
import { openApiDocument } from './openapi.js';
import { runPasses } from './passes.js';
import { verifyRequestSchema } from './schemas.js';
import { DEFAULT_RUBRIC, tierOf, TIER_NAMES } from './tiers.js';

/** Counters kept across restarts (the store's StatsStore fits). */
export interface Counters {
  increment(name: string, by?: number): void;
  read(prefix?: string): Record<string, number>;
}

export interface VerifyDeps {
  log: Logger;
  serviceName: string;
  paywall?: Paywall;
  /** Absent when no LLM base URL is configured. */
  llm?: Llm;
  models?: readonly string[];
  llmSettings?: { temperature: number; maxTokens: number; passTimeoutMs: number };
  facilitatorUrl?: string;
  stats?: Counters;
}

const PREFIX = 'verify|';
const BODY_LIMIT = 1024 * 1024;

export function createVerifyApi(deps: VerifyDeps): HttpApp {
  const stats = deps.stats;
  const models = deps.models ?? [];
  const notConfigured = [
    ...(deps.llm ? [] : ['verify.llm.baseUrl']),
    ...(models.length ? [] : ['verify.llm.models']),
    ...(deps.paywall?.configured ? [] : ['verify.x402.payTo']),
  ];
  const origin = (ctx: Ctx) => {
    const raw = ctx.req.headers.host ?? (ctx.req.headers as Record<string, string | undefined>)[':authority'];
    const host = typeof raw === 'string' && /^[a-z0-9.-]+(:\d{1,5})?$/i.test(raw) ? raw.toLowerCase() : ctx.host;
    return `${ctx.scheme}://${host}`;
  };
  const disc = (ctx: Ctx): DiscoveryContext | undefined =>
    deps.paywall && { serviceName: deps.serviceName, origin: origin(ctx), paywall: deps.paywall, facilitatorUrl: deps.facilitatorUrl ?? '', notConfigured };

  const router = new Router(deps.log)
    .on('GET', '/healthz', () => ({ status: 200, body: { ok: true, service: deps.serviceName } }))
    .on('GET', '/openapi.json', (ctx) => ({ status: 200, body: openApiDocument({ serviceName: deps.serviceName, serverUrl: origin(ctx) }) }))
    .on('GET', '/v1/info', (ctx) => {
      const d = disc(ctx);
      if (!d) throw new AppError('unavailable', 'not_configured', 'payments are not wired on this host');
      return { status: 200, body: serviceInfo(d) };
    })
    .on('GET', '/.well-known/x402', (ctx) => {
      const d = disc(ctx);
      if (!d) throw new AppError('unavailable', 'not_configured', 'payments are not wired on this host');
      return { status: 200, body: x402Manifest(d) };
    })
    .on('GET', '/v1/stats', () => ({ status: 200, body: readStats(deps.serviceName, stats) }))
    .on('POST', '/v1/verify/:tier', (ctx) => verifyHandler(ctx), { bodyLimit: BODY_LIMIT });
  for (const path of ['/healthz', '/openapi.json', '/v1/info', '/.well-known/x402', '/v1/stats', '/v1/verify/:tier']) {
    router.on('OPTIONS', path, () => ({ status: 204, headers: { 'access-control-allow-methods': 'GET, POST, OPTIONS', 'access-control-allow-headers': 'content-type, x-payment, payment-signature', 'access-control-max-age': '600' } }));
  }
  if (stats) router.observe((route, method, status) => stats.increment(`${PREFIX}req|${method} ${route}|${status}`));

  async function verifyHandler(ctx: Ctx) {
    const tier = tierOf(ctx.params.tier);
    if (!tier) throw new AppError('not_found', 'unknown_tier', `tier ${JSON.stringify(ctx.params.tier.slice(0, 40))} does not exist; use one of ${TIER_NAMES.join(', ')}`);
    const raw = await ctx.json();
    if (raw === undefined) throw new AppError('bad_request', 'invalid_request', 'send a JSON body {"artifact": "...", "rubric"?: "..."}');
    const body = validate(verifyRequestSchema, raw);
    const { llm, paywall, llmSettings } = deps;
    if (!llm || !models.length || !paywall?.configured || !llmSettings) {
      throw new AppError('unavailable', 'not_configured', `the verification service is not configured on this host: ${notConfigured.join(', ')} must be set by the operator`);
    }
    const resource = { url: `${origin(ctx)}/v1/verify/${tier.name}`, description: `${tier.name} verification: ${tier.passes} independent verifier passes`, mimeType: 'application/json' };
    if (!paywall.hasPayment(ctx.req.headers)) {
      stats?.increment(`${PREFIX}unpaid402`);
      throw paywall.challenge(tier.amount, resource);
    }
    const paid = await paywall.charge({ headers: ctx.req.headers, amount: tier.amount, resource, purpose: 'verify', meta: { tier: tier.name } }, async () => {
      const started = performance.now();
      const out = await runPasses({ llm, models, ...llmSettings }, body.artifact, body.rubric ?? DEFAULT_RUBRIC, tier.passes);
      if (out.passes.length < quorum(tier.passes)) {
        ctx.log.warn('verification failed', { tier: tier.name, completed: out.passes.length, failures: out.failures.slice(0, 5) });
        throw new AppError(
          'upstream',
          'llm_failed',
          `only ${out.passes.length} of ${tier.passes} verifier passes completed (${quorum(tier.passes)} needed) because of language-model provider errors; the payment was not settled`,
        );
      }
      return {
        service: deps.serviceName,
        tier: tier.name,
        price: tier.price,
        passes_requested: tier.passes,
        passes_completed: out.passes.length,
        ...reportOrder(aggregate(out.passes, tier.passes), out.passes),
        ms: Math.round(performance.now() - started),
      };
    });
    stats?.increment(`${PREFIX}paid`);
    return { status: 200, headers: paid.headers, body: paid.result };
  }

  return {
    handle(req: Req, res: Res, info: RequestInfo) {
      res.setHeader('access-control-allow-origin', '*');
      res.setHeader('access-control-expose-headers', PAYMENT_EXPOSE_HEADERS);
      return router.handle(req, res, info);
    },
  };
}

function reportOrder(a: ReturnType<typeof aggregate>, passes: unknown[]) {
  return { verdict: a.verdict, tally: a.tally, counts: a.counts, passes, dissent: a.dissent };
}

function readStats(service: string, stats?: Counters) {
  const all = stats?.read(PREFIX) ?? {};
  const requests: Record<string, Record<string, number>> = {};
  for (const [k, n] of Object.entries(all)) {
    const parts = k.split('|');
    if (parts[1] !== 'req' || parts.length !== 4) continue;
    (requests[parts[2]] ??= {})[parts[3]] = n;
  }
  return { service, requests, unpaid_402: all[`${PREFIX}unpaid402`] ?? 0, paid_hits: all[`${PREFIX}paid`] ?? 0 };
}

export { TIERS, DEFAULT_RUBRIC } from './tiers.js';
