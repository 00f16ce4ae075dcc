// The free descriptive endpoints' bodies: the service card (/v1/info) and the x402 manifest of
// paid resources (/.well-known/x402) with method, URL, accepts, input and output schemas. The
// card's payment part also says who settles and whether payments can be taken now (health).

import { jsonSchemaOf as schemaOf } from '../http/index.js';
import type { Paywall } from '../payments/index.js';
import { verifyReportSchema, verifyRequestSchema } from './schemas.js';
import { DEFAULT_RUBRIC, MAX_ARTIFACT, MAX_RUBRIC, TIERS } from './tiers.js';

export interface DiscoveryContext {
  serviceName: string;
  /** `https://verify.example.com` as the client reached us. */
  origin: string;
  paywall: Paywall;
  facilitatorUrl: string;
  notConfigured: string[];
}

export function serviceInfo(c: DiscoveryContext) {
  return {
    service: c.serviceName,
    version: '1.0.0',
    tiers: Object.values(TIERS).map((t) => ({
      tier: t.name,
      passes: t.passes,
      price: t.price,
      amount: t.amount.toString(),
      endpoint: `POST ${c.origin}/v1/verify/${t.name}`,
    })),
    payment: {
      x402Version: 2 as const,
      scheme: 'exact' as const,
      network: c.paywall.network.network,
      asset: c.paywall.network.asset,
      payTo: c.paywall.configured ? c.paywall.requirements(1n).payTo : null,
      facilitator: c.paywall.state.settlement === 'self' ? null : c.facilitatorUrl,
      ...c.paywall.state,
    },
    request: {
      artifact: `string, required, 1 to ${MAX_ARTIFACT} characters`,
      rubric: `string, optional, at most ${MAX_RUBRIC} characters`,
      default_rubric: DEFAULT_RUBRIC,
    },
    not_configured: c.notConfigured,
  };
}

export function x402Manifest(c: DiscoveryContext) {
  const input = schemaOf(verifyRequestSchema, 'input');
  const output = schemaOf(verifyReportSchema, 'output');
  return {
    x402Version: 2,
    service: c.serviceName,
    resources: Object.values(TIERS).map((t) => ({
      resource: `${c.origin}/v1/verify/${t.name}`,
      type: 'http',
      method: 'POST',
      x402Version: 2,
      description: `${t.name} verification: ${t.passes} independent verifier passes, ${t.price} per call`,
      mimeType: 'application/json',
      accepts: c.paywall.configured ? [c.paywall.requirements(t.amount)] : [],
      input: { type: 'http', method: 'POST', bodyType: 'json', bodySchema: input },
      output,
    })),
  };
}

export interface HomeContext {
  serviceName: string;
  origin: string;
  paywall?: Paywall;
  notConfigured: string[];
}

/** `GET /` for agents (and the facts of the page for people, pages/verifyhome.ts): what the
 *  service does, its tiers and prices, how to pay with x402 and where the machine-readable
 *  descriptions are. Answers without payments wired too (then `available` is false). */
export function verifyHome(c: HomeContext) {
  const p = c.paywall;
  return {
    service: c.serviceName,
    about:
      'Judges a text artifact against a rubric with several independent AI verifier passes and answers one aggregated verdict with every pass. Each call is paid with x402: USDC, no account, no API key.',
    tiers: Object.values(TIERS).map((t) => ({ tier: t.name, passes: t.passes, price: t.price, endpoint: `POST ${c.origin}/v1/verify/${t.name}` })),
    payment: {
      protocol: 'x402' as const,
      x402Version: 2 as const,
      scheme: 'exact' as const,
      network: p ? `${p.network.name} (${p.network.network})` : null,
      asset: p?.network.asset ?? null,
      available: !!p?.configured && p.state.available,
      steps: [
        `POST ${c.origin}/v1/verify/{tier} with {"artifact": "...", "rubric": "..."} and no payment: 402 with the payment requirements (PAYMENT-REQUIRED header and body).`,
        'Sign an EIP-3009 transferWithAuthorization for the amount to payTo with the payer wallet (any x402 v2 client does this).',
        'Repeat the same request with the signed payload in the PAYMENT-SIGNATURE (or X-PAYMENT) header: 200 with the report and a PAYMENT-RESPONSE header naming the settlement.',
      ],
    },
    request: { artifact: `string, 1 to ${MAX_ARTIFACT} characters`, rubric: `string, optional, at most ${MAX_RUBRIC} characters` },
    links: { info: `${c.origin}/v1/info`, openapi: `${c.origin}/openapi.json`, manifest: `${c.origin}/.well-known/x402`, stats: `${c.origin}/v1/stats` },
    not_configured: c.notConfigured,
  };
}
