// The zod schemas of the verification API: what handlers validate and return, and the source
// of /openapi.json and the input/output schemas in /.well-known/x402.

import { z } from 'zod';
import { MAX_ARTIFACT, MAX_RUBRIC, TIER_NAMES } from './tiers.js';

/** Named schemas of this API; /openapi.json lists them under components.schemas. */
export const registry = z.registry<{ id: string }>();

export const verdictSchema = z.enum(['pass', 'fail', 'abstain']).describe('Verdict of one pass.');

export const verifyRequestSchema = z
  .object({
    artifact: z
      .string({ error: 'artifact is required and must be a string' })
      .min(1, 'artifact must not be empty')
      .max(MAX_ARTIFACT, `artifact must be at most ${MAX_ARTIFACT} characters`)
      .refine((s) => s.trim().length > 0, 'artifact must not be blank')
      .describe('Text to verify.'),
    rubric: z.string().max(MAX_RUBRIC, `rubric must be at most ${MAX_RUBRIC} characters`).optional().describe('Judging criteria; the default rubric applies when omitted.'),
  })
  .register(registry, { id: 'VerifyRequest' });

export const verifierPassSchema = z
  .object({
    verdict: verdictSchema,
    reasoning: z.string().describe('2 to 4 sentences citing specifics.'),
  })
  .register(registry, { id: 'VerifierPass' });

export const verifyReportSchema = z
  .object({
    service: z.string(),
    tier: z.enum(TIER_NAMES as [string, ...string[]]),
    price: z.string().describe('Tier price, `$<amount>`.'),
    passes_requested: z.number().int(),
    passes_completed: z.number().int(),
    verdict: z.enum(['pass', 'fail', 'tie']).describe('pass or fail by majority of pass vs fail votes (abstains excluded); tie when equal.'),
    tally: z.string().describe('`<larger of pass, fail count>/<passes requested>`.'),
    counts: z.object({ pass: z.number().int(), fail: z.number().int(), abstain: z.number().int() }),
    passes: z.array(verifierPassSchema).describe('Completed passes only.'),
    dissent: z.string().nullable().describe('Reasoning of the minority passes, joined; null when unanimous.'),
    ms: z.number().int().describe('Server-side verification time in milliseconds.'),
  })
  .register(registry, { id: 'VerifyReport' });

export const errorSchema = z
  .object({ error: z.string().describe('Stable error code.'), detail: z.string().describe('Human-readable explanation.') })
  .register(registry, { id: 'Error' });

export const healthSchema = z.object({ ok: z.literal(true), service: z.string() }).register(registry, { id: 'Health' });

export const infoSchema = z
  .object({
    service: z.string(),
    version: z.string(),
    tiers: z.array(z.object({ tier: z.string(), passes: z.number().int(), price: z.string(), amount: z.string(), endpoint: z.string() })),
    payment: z.object({ x402Version: z.literal(2), scheme: z.literal('exact'), network: z.string(), asset: z.string(), payTo: z.string().nullable(), facilitator: z.string() }),
    request: z.object({ artifact: z.string(), rubric: z.string(), default_rubric: z.string() }),
    not_configured: z.array(z.string()).describe('What the operator still has to configure before paid calls work; empty when ready.'),
  })
  .register(registry, { id: 'ServiceInfo' });

export const statsSchema = z
  .object({
    service: z.string(),
    requests: z.record(z.string(), z.record(z.string(), z.number().int())).describe('Counts by route (`METHOD /path`) and status code.'),
    unpaid_402: z.number().int(),
    paid_hits: z.number().int(),
  })
  .register(registry, { id: 'Stats' });
