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
