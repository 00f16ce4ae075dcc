// The verification API's service (verify.{domain}): the paid route POST /v1/verify/{tier} (tier →
// body → configured → payment → passes, answered as one report) and the free ones (/, /v1/info,
// /v1/stats, /.well-known/x402, /openapi.json) wired onto the routes declared in routes.ts, with
// the request and payment counters kept in the store's stats.

import { AppError } from '../errors.js';
import { documentOf, Router, type BaseCtx as Ctx, type HttpApp, type Req, type RequestInfo, type Res } from '../http/index.js';
import type { Llm } from '../llm/index.js';
import type { Logger } from '../log/index.js';
import { PAYMENT_EXPOSE_HEADERS, type Paywall } from '../payments/index.js';
import { PublicUrls, verifyHomeReply, wantsHtml } from '../pages/index.js';
import { aggregate, quorum } from './aggregate.js';
import { serviceInfo, verifyHome, x402Manifest, type DiscoveryContext } from './discovery.js';
import { runPasses } from './passes.js';
import { verifyRoutes, type VerifyCtx } from './routes.js';
import { SCHEMAS } from './schemas.js';
import { DEFAULT_RUBRIC, tierOf } from './tiers.js';

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
  /** How clients reach this daemon (config `public`); default: as each request reached it. */
  urls?: PublicUrls;
}

const PREFIX = 'verify|';
const DESCRIPTION = 'Judges a text artifact against a rubric with several independent AI verifier passes. Each call is paid with x402 (scheme exact).';

export function createVerifyApi(deps: VerifyDeps): HttpApp {
  const stats = deps.stats;
  const models = deps.models ?? [];
  const notConfigured = [
    ...(deps.llm ? [] : ['verify.llm.baseUrl']),
    ...(models.length ? [] : ['verify.llm.models']),
    ...(deps.paywall?.configured ? [] : ['verify.x402.payTo']),
  ];
  const urls = deps.urls ?? new PublicUrls();
  const origin = (ctx: Ctx) => urls.origin(ctx.req, ctx.scheme, ctx.host);
  const disc = (ctx: Ctx): DiscoveryContext | undefined =>
    deps.paywall && { serviceName: deps.serviceName, origin: origin(ctx), paywall: deps.paywall, facilitatorUrl: deps.facilitatorUrl ?? '', notConfigured };

  const router = new Router(deps.log);
  const document = documentOf({
    info: { title: `${deps.serviceName} verification API`, version: '1.0.0', description: DESCRIPTION },
    routes: () => router.routes,
    schemas: SCHEMAS,
  });
  const wired = (ctx: Ctx) => {
    const d = disc(ctx);
    if (!d) throw new AppError('unavailable', 'not_configured', 'payments are not wired on this host');
    return d;
  };
  router.add(
    ...verifyRoutes({
      serviceName: deps.serviceName,
      home: (ctx) => {
        const facts = verifyHome({ serviceName: deps.serviceName, origin: origin(ctx), paywall: deps.paywall, notConfigured });
        return wantsHtml(ctx.req) ? verifyHomeReply(facts, ctx.host) : { status: 200, headers: { vary: 'Accept' }, body: facts };
      },
      info: (ctx) => serviceInfo(wired(ctx)),
      manifest: (ctx) => x402Manifest(wired(ctx)),
      stats: () => readStats(deps.serviceName, stats),
      document: (ctx) => document(origin(ctx)),
      verify: (ctx) => verifyHandler(ctx),
    }),
  );
  if (stats) router.observe((route, method, status) => stats.increment(`${PREFIX}req|${method} ${route}|${status}`));

  /** Tier and body come validated by the route (routes.ts). */
  async function verifyHandler(ctx: VerifyCtx) {
    const tier = tierOf(ctx.params.tier)!;
    const body = ctx.body;
    const { llm, paywall, llmSettings } = deps;
    if (!llm || !models.length || !paywall?.configured || !llmSettings) {
      throw new AppError(
        'unavailable',
        'not_configured',
        `the verification service is not configured on this host: ${notConfigured.join(', ')} must be set by the operator`,
      );
    }
    const resource = {
      url: `${origin(ctx)}/v1/verify/${tier.name}`,
      description: `${tier.name} verification: ${tier.passes} independent verifier passes`,
      mimeType: 'application/json',
    };
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
