// The verification slice of the config: LLM provider and pass tuning, x402 payment terms,
// facilitator and settlement reconciliation.

import { z } from 'zod';
import { duration, list } from './fields.js';
import type { EnvBinding } from './env.js';

export const verifySchema = z
  .strictObject({
    serviceName: z.string().min(1).default('rootbox-verify').describe('Name reported as `service` in reports, /healthz and the service card.'),
    llm: z
      .strictObject({
        baseUrl: z
          .string()
          .url()
          .optional()
          .describe(
            'OpenAI-compatible API base URL (OpenAI, vLLM, Ollama, llama.cpp server), e.g. https://api.openai.com/v1. Without it the paid route answers 503 not_configured.',
          ),
        apiKey: z.string().optional().describe('API key for the LLM provider; falls back to OPENAI_API_KEY. Never logged.'),
        models: list(z.string().min(1))
          .prefault([])
          .describe(
            'Models rotated across passes (pass i uses models[i mod n]). Comma-separated in the environment. Without any model the paid route answers 503 not_configured.',
          ),
        passTimeout: duration().prefault('60s').describe('Time limit of one pass, including its one retry.'),
        concurrency: z.coerce
          .number()
          .int()
          .min(1)
          .max(256)
          .default(16)
          .describe(
            'Most LLM requests in flight at once across all verifications; further passes wait for a slot (the wait counts against their pass timeout).',
          ),
        temperature: z.coerce
          .number()
          .min(0)
          .max(2)
          .default(0.3)
          .describe('Base sampling temperature; each pass adds a small per-pass offset so passes are not identical draws.'),
        maxTokens: z.coerce.number().int().min(64).max(32768).default(800).describe('Upper bound on tokens the model may produce for one pass.'),
      })
      .prefault({}),
    x402: z
      .strictObject({
        network: z
          .enum(['base', 'base-sepolia'])
          .default('base')
          .describe('Payment network preset: `base` (eip155:8453, USDC 0x8335…2913) or `base-sepolia` (eip155:84532, USDC 0x036C…CF7e).'),
        payTo: z
          .string()
          .regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address')
          .optional()
          .describe('Address that receives payments. Without it the paid routes answer 503 not_configured.'),
        facilitatorUrl: z
          .string()
          .url()
          .default('https://x402.org/facilitator')
          .describe('x402 facilitator base URL (its /verify, /settle and /supported endpoints).'),
        facilitatorTimeout: duration().prefault('10s').describe('Time limit of one facilitator /verify or /supported call.'),
        settleTimeout: duration()
          .prefault('30s')
          .describe(
            'Time limit of one facilitator /settle call; when it passes the outcome is unknown, the settlement is recorded as pending and reconciled later.',
          ),
        reconcileInterval: duration()
          .prefault('30s')
          .describe('How often pending settlements (unknown outcome) are retried with the facilitator until settled, refused or expired.'),
        maxTimeoutSeconds: z.coerce
          .number()
          .int()
          .min(10)
          .max(3600)
          .default(300)
          .describe('Longest validity window a payment authorization may have, advertised in the terms.'),
      })
      .prefault({}),
  })
  .prefault({});

export const verifyEnv: EnvBinding[] = [
  { env: 'ROOTBOX_VERIFY_SERVICE_NAME', path: 'verify.serviceName' },
  { env: 'ROOTBOX_LLM_BASE_URL', path: 'verify.llm.baseUrl' },
  { env: 'ROOTBOX_LLM_API_KEY', path: 'verify.llm.apiKey', fallback: 'OPENAI_API_KEY' },
  { env: 'ROOTBOX_LLM_MODELS', path: 'verify.llm.models' },
  { env: 'ROOTBOX_LLM_PASS_TIMEOUT', path: 'verify.llm.passTimeout' },
  { env: 'ROOTBOX_LLM_CONCURRENCY', path: 'verify.llm.concurrency' },
  { env: 'ROOTBOX_X402_NETWORK', path: 'verify.x402.network' },
  { env: 'ROOTBOX_PAY_TO', path: 'verify.x402.payTo' },
  { env: 'ROOTBOX_FACILITATOR_URL', path: 'verify.x402.facilitatorUrl' },
];
