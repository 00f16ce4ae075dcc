// GET /account/recharge (how to add credit: HTML for browsers, JSON for agents; open without a
// key — a browser follows upgrade_url as a link — and with the caller's credits when the request
// carries its api_key) and POST /account/recharge {"usd": N} (authenticated, paid with x402 for
// exactly that amount), declared here.

import { AppError } from '../errors.js';
import type { Billing } from '../billing/index.js';
import type { Config } from '../config/index.js';
import { challengeBodySchema, PAYMENT_EXPOSE_HEADERS, type Paywall } from '../payments/index.js';
import { routes, type BaseCtx, type Reply, type Route, type Step } from '../http/index.js';
import { PublicUrls, rechargeReply, wantsHtml } from '../pages/index.js';
import type { AccountRecord } from '../store/index.js';
import { RechargeInfo, RechargeRequest, RechargeResult } from './schemas.js';
import { z } from 'zod';

type RechargeConfig = Pick<Config, 'public' | 'billing'>;

function rechargeInfo(ctx: BaseCtx, api: string, cfg: RechargeConfig, billing: Billing, account: AccountRecord | undefined, paywall?: Paywall): Reply {
  const credits = account && billing.credits(account);
  const verified = Boolean(account?.phone);
  const endpoint = `${api}/account/recharge`;
  const b = cfg.billing;
  if (wantsHtml(ctx.req)) {
    return rechargeReply({
      endpoint,
      api,
      paymentsConfigured: paywall?.configured ?? false,
      maxUsd: b.maxRechargeUsd,
      prices: { ramUsdPerGbHour: b.ramUsdPerGbHour, diskUsdPerGbMonth: b.diskUsdPerGbMonth, egressUsdPerGb: b.egressUsdPerGb },
      credits,
      verified,
    });
  }
  const info = {
    how: 'POST /account/recharge with {"usd": <amount>} and your Bearer api_key; the answer is 402 with x402 v2 payment terms for exactly that amount (USDC). Pay them with an x402 client and repeat the request with the X-PAYMENT header; the balance is credited once per payment.',
    endpoint,
    method: 'POST' as const,
    body: { usd: 5 },
    payments_configured: paywall?.configured ?? false,
    ...(verified ? {} : { verify_phone_instead: `POST ${api}/create with {"phone": "+…"} raises the free grant once the code is proven` }),
    ...(credits ? { credits } : {}),
  };
  return { status: 200, headers: { vary: 'Accept, Authorization' }, body: info };
}

export function rechargeRoutes(billing: Billing, ipLimit: Step, paywall: Paywall | undefined, cfg: RechargeConfig): Route<AccountRecord>[] {
  const route = routes<AccountRecord>();
  const urls = new PublicUrls(cfg.public);
  const base = (ctx: BaseCtx) => urls.origin(ctx.req, ctx.scheme, ctx.host);
  return [
    route({
      method: 'GET',
      path: '/account/recharge',
      auth: 'optional',
      summary: 'How to add credit (HTML for browsers, JSON for agents); your credits too when the api_key is sent',
      use: [ipLimit],
      responses: {
        200: {
          description:
            'Instructions, and the current credits when the request carries the api_key. The HTML page asks for the key in the page and sends it only in the Authorization header.',
          json: RechargeInfo,
          media: { 'text/html': z.string() },
        },
      },
      handler: (ctx) => rechargeInfo(ctx, base(ctx), cfg, billing, ctx.auth, paywall),
    }),
    route({
      method: 'POST',
      path: '/account/recharge',
      auth: 'bearer',
      summary: 'Add credit, paid with x402 for exactly the amount',
      use: [ipLimit],
      headers: { 'X-PAYMENT': { description: 'x402 payment payload (base64 JSON) on the paid retry; PAYMENT-SIGNATURE is accepted too.' } },
      body: RechargeRequest,
      bodyLimit: 4096,
      responses: {
        200: {
          description: 'Credited, or credited once the payment settles',
          json: RechargeResult,
          headers: { 'PAYMENT-RESPONSE': { description: 'x402 settlement response (base64 JSON).', required: true } },
        },
        400: 'The amount is not a number from 0.01 to the largest recharge, or has more than 6 decimals.',
        402: {
          description: 'Payment required, invalid, refused or already used: the x402 terms for exactly this amount',
          json: challengeBodySchema,
          headers: { 'PAYMENT-REQUIRED': { description: 'x402 v2 payment terms (base64 JSON).', required: true } },
        },
        502: 'The payment facilitator (or, with self-settlement, the chain) could not be reached; nothing was charged.',
        503: 'Payments are not configured on this host, or cannot be taken now (payments_unavailable: the facilitator lacks our network or refuses our key, the gas wallet is low), or, in cluster mode, the registry that holds balances cannot be reached (registry_unavailable); nothing was charged.',
      },
      async handler(ctx) {
        if (!paywall?.configured)
          throw AppError.of('not_configured', 'payments are not configured on this host (no payTo address); ask the operator, or verify a phone');
        const r = await billing.recharge(paywall, ctx.auth, ctx.body.usd, ctx.req.headers as Record<string, string>, `${base(ctx)}/account/recharge`);
        return { status: 200, headers: { ...r.headers, 'access-control-expose-headers': PAYMENT_EXPOSE_HEADERS, 'cache-control': 'no-store' }, body: r.body };
      },
    }),
  ];
}
