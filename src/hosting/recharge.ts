// GET /account/recharge (how to add credit: HTML for browsers, JSON for agents) and
// POST /account/recharge {"usd": N} (paid with x402 for exactly that amount), declared here.

import { AppError } from '../errors.js';
import type { Billing } from '../billing/index.js';
import { challengeBodySchema, PAYMENT_EXPOSE_HEADERS, type Paywall } from '../payments/index.js';
import { routes, type BaseCtx, type Reply, type Route, type Step } from '../http/index.js';
import type { AccountRecord } from '../store/index.js';
import { RechargeInfo, RechargeRequest, RechargeResult } from './schemas.js';
import { z } from 'zod';

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function rechargeInfo(ctx: BaseCtx, billing: Billing, account: AccountRecord, paywall?: Paywall): Reply {
  const base = `${ctx.scheme}://${ctx.host}`;
  const credits = billing.credits(account);
  const info = {
    how: 'POST /account/recharge with {"usd": <amount>} and your Bearer api_key; the answer is 402 with x402 v2 payment terms for exactly that amount (USDC). Pay them with an x402 client and repeat the request with the X-PAYMENT header; the balance is credited once per payment.',
    endpoint: `${base}/account/recharge`,
    method: 'POST',
    body: { usd: 5 },
    payments_configured: paywall?.configured ?? false,
    verify_phone_instead: `POST ${base}/create with {"phone": "+…"} raises the free grant once the code is proven`,
    credits,
  };
  if (!String(ctx.req.headers.accept ?? '').includes('text/html')) return { status: 200, body: info };
  const html = `<!doctype html><meta charset="utf-8"><title>Add credit · rootbox</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em}code,pre{background:#f4f4f4;padding:.1em .3em}</style>
<h1>Add credit</h1>
<p>Balance: <b>$${credits.balance_usd}</b> · RAM left in the free grant: ${credits.ram_gb_hours_left} GB-hours · egress left: ${credits.egress_gb_left} GB · tier: ${esc(credits.tier)}</p>
<p>${esc(info.how)}</p>
<pre>curl -X POST ${esc(info.endpoint)} -H 'authorization: Bearer rbx_…' -H 'content-type: application/json' -d '{"usd": 5}'</pre>
<p>Or verify a phone: <code>${esc(info.verify_phone_instead)}</code>.</p>`;
  return { status: 200, headers: { 'content-type': 'text/html; charset=utf-8' }, body: html };
}

export function rechargeRoutes(billing: Billing, ipLimit: Step, paywall?: Paywall): Route<AccountRecord>[] {
  const route = routes<AccountRecord>();
  return [
    route({
      method: 'GET',
      path: '/account/recharge',
      auth: 'bearer',
      summary: 'How to add credit (HTML for browsers, JSON for agents)',
      use: [ipLimit],
      responses: { 200: { description: 'Instructions and current credits', json: RechargeInfo, media: { 'text/html': z.string() } } },
      handler: (ctx) => rechargeInfo(ctx, billing, ctx.auth, paywall),
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
        502: 'The payment facilitator could not be reached; nothing was charged.',
        503: 'Payments are not configured on this host.',
      },
      async handler(ctx) {
        if (!paywall?.configured)
          throw AppError.of('not_configured', 'payments are not configured on this host (no payTo address); ask the operator, or verify a phone');
        const r = await billing.recharge(
          paywall,
          ctx.auth,
          ctx.body.usd,
          ctx.req.headers as Record<string, string>,
          `${ctx.scheme}://${ctx.host}/account/recharge`,
        );
        return { status: 200, headers: { ...r.headers, 'access-control-expose-headers': PAYMENT_EXPOSE_HEADERS, 'cache-control': 'no-store' }, body: r.body };
      },
    }),
  ];
}
