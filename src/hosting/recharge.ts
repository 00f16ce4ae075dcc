// GET /account/recharge (how to add credit: HTML for browsers, JSON for agents) and
// POST /account/recharge {"usd": N} (paid with x402 for exactly that amount).

import { AppError } from '../errors.js';
import type { Billing } from '../billing/index.js';
import { PAYMENT_EXPOSE_HEADERS, type Paywall } from '../payments/index.js';
import type { Ctx, Reply } from '../http/index.js';
import type { AccountRecord } from '../store/index.js';

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function rechargeInfo(ctx: Ctx, billing: Billing, account: AccountRecord, paywall?: Paywall): Reply {
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

export async function recharge(ctx: Ctx, billing: Billing, account: AccountRecord, paywall?: Paywall): Promise<Reply> {
  if (!paywall?.configured) throw AppError.of('not_configured', 'payments are not configured on this host (no payTo address); ask the operator, or verify a phone');
  const body = await ctx.json();
  if (!body || typeof body !== 'object' || Array.isArray(body) || Object.keys(body).some((k) => k !== 'usd')) {
    throw AppError.of('invalid_request', 'body: must be {"usd": <amount>}');
  }
  const r = await billing.recharge(paywall, account, (body as { usd: unknown }).usd, ctx.req.headers as Record<string, string>, `${ctx.scheme}://${ctx.host}/account/recharge`);
  return { status: 200, headers: { ...r.headers, 'access-control-expose-headers': PAYMENT_EXPOSE_HEADERS, 'cache-control': 'no-store' }, body: r.body };
}
