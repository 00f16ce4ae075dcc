// The zod schemas of the verification API: what the routes validate and answer (routes.ts, from
// which /openapi.json is derived) and the input/output schemas in /.well-known/x402. SCHEMAS
// names the ones shown as components.

import { z } from 'zod';
import { challengeBodySchema } from '../payments/index.js';
import { MAX_ARTIFACT, MAX_RUBRIC, TIER_NAMES } from './tiers.js';

export const verdictSchema = z.enum(['pass', 'fail', 'abstain']).describe('Verdict of one pass.');

export const verifyRequestSchema = z.object({
  artifact: z
    .string({ error: 'artifact is required and must be a string' })
    .min(1, 'artifact must not be empty')
    .max(MAX_ARTIFACT, `artifact must be at most ${MAX_ARTIFACT} characters`)
    .refine((s) => s.trim().length > 0, 'artifact must not be blank')
    .describe('Text to verify.'),
  rubric: z
    .string()
    .max(MAX_RUBRIC, `rubric must be at most ${MAX_RUBRIC} characters`)
    .optional()
    .describe('Judging criteria; the default rubric applies when omitted.'),
});

export const verifierPassSchema = z.object({
  verdict: verdictSchema,
  reasoning: z.string().describe('2 to 4 sentences citing specifics.'),
});

export const verifyReportSchema = z.object({
  service: z.string(),
  tier: z.enum(TIER_NAMES as [string, ...string[]]),
  price: z.string().describe('Tier price, `$<amount>`.'),
  passes_requested: z.number().int().min(1),
  passes_completed: z.number().int().min(0),
  verdict: z.enum(['pass', 'fail', 'tie']).describe('pass or fail by majority of pass vs fail votes (abstains excluded); tie when equal.'),
  tally: z.string().describe('`<larger of pass, fail count>/<passes requested>`.'),
  counts: z.object({ pass: z.number().int().min(0), fail: z.number().int().min(0), abstain: z.number().int().min(0) }),
  passes: z.array(verifierPassSchema).describe('Completed passes only.'),
  dissent: z.string().nullable().describe('Reasoning of the minority passes, joined; null when unanimous.'),
  ms: z.number().int().min(0).describe('Server-side verification time in milliseconds.'),
});

export const healthSchema = z.object({ ok: z.literal(true), service: z.string() });

export const homeSchema = z.object({
  service: z.string(),
  about: z.string(),
  tiers: z.array(z.object({ tier: z.string(), passes: z.number().int().min(1), price: z.string(), endpoint: z.string() })),
  payment: z.object({
    protocol: z.literal('x402'),
    x402Version: z.literal(2),
    scheme: z.literal('exact'),
    network: z.string().nullable(),
    asset: z.string().nullable(),
    available: z.boolean().describe('false while payments cannot be taken (not configured, or unhealthy): the paid routes answer 503.'),
    steps: z.array(z.string()).describe('How a client pays, in order.'),
  }),
  request: z.object({ artifact: z.string(), rubric: z.string() }),
  links: z.object({ info: z.string(), openapi: z.string(), manifest: z.string(), stats: z.string() }),
  not_configured: z.array(z.string()),
});

export const infoSchema = z.object({
  service: z.string(),
  version: z.string(),
  tiers: z.array(z.object({ tier: z.string(), passes: z.number().int().min(1), price: z.string(), amount: z.string(), endpoint: z.string() })),
  payment: z.object({
    x402Version: z.literal(2),
    scheme: z.literal('exact'),
    network: z.string(),
    asset: z.string(),
    payTo: z.string().nullable(),
    facilitator: z.string().nullable().describe('Facilitator base URL; null when this host settles payments on chain itself.'),
    settlement: z.enum(['facilitator', 'self']).describe('Who settles payments: an x402 facilitator, or this host on chain (self).'),
    available: z.boolean().describe('false while payments cannot be taken: the paid routes answer 503 payments_unavailable.'),
    problems: z.array(z.string()).describe('Why payments are unavailable, or checks of the facilitator or chain that could not run.'),
    checked_at: z.string().nullable().describe('When the facilitator (/supported) or the chain was last checked.'),
    gas_wallet: z
      .object({ address: z.string(), balance_eth: z.string().nullable(), min_eth: z.string(), ok: z.boolean().nullable() })
      .optional()
      .describe('Self-settlement: the wallet that pays gas, its balance and the configured minimum.'),
  }),
  request: z.object({ artifact: z.string(), rubric: z.string(), default_rubric: z.string() }),
  not_configured: z.array(z.string()).describe('What the operator still has to configure before paid calls work; empty when ready.'),
});

export const statsSchema = z.object({
  service: z.string(),
  requests: z.record(z.string(), z.record(z.string(), z.number().int().min(0))).describe('Counts by route (`METHOD /path`) and status code.'),
  unpaid_402: z.number().int().min(0),
  paid_hits: z.number().int().min(0),
});

export const tierPathSchema = z.object({ tier: z.enum(TIER_NAMES as [string, ...string[]]).describe('Verification tier.') });

const jsonSchema = z.record(z.string(), z.unknown()).describe('A JSON Schema.');

export const manifestSchema = z.object({
  x402Version: z.literal(2),
  service: z.string(),
  resources: z.array(
    z.object({
      resource: z.string(),
      type: z.literal('http'),
      method: z.literal('POST'),
      x402Version: z.literal(2),
      description: z.string(),
      mimeType: z.literal('application/json'),
      accepts: z.array(challengeBodySchema.shape.accepts.element).describe('Payment terms; empty while no payTo address is configured.'),
      input: z.object({ type: z.literal('http'), method: z.literal('POST'), bodyType: z.literal('json'), bodySchema: jsonSchema }),
      output: jsonSchema,
    }),
  ),
});

export const openApiSchema = z.record(z.string(), z.unknown()).describe('An OpenAPI 3.1 document.');

/** The schemas listed under components.schemas, by name. */
export const SCHEMAS: Record<string, z.ZodType> = {
  VerifyRequest: verifyRequestSchema,
  VerifierPass: verifierPassSchema,
  VerifyReport: verifyReportSchema,
  Home: homeSchema,
  Health: healthSchema,
  ServiceInfo: infoSchema,
  Stats: statsSchema,
  PaymentRequired: challengeBodySchema,
  X402Manifest: manifestSchema,
};
