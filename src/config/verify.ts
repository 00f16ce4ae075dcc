// The verification slice of the config: LLM provider, x402 payment terms, facilitator.

import { z } from 'zod';
import { duration, list } from './fields.js';
import type { EnvBinding } from './env.js';

export const verifySchema = z
  .object({
    serviceName: z.string().min(1).default('rootbox-verify').describe('Name reported as `service` in reports, /healthz and the service card.'),
    llm: z
      .object({
        baseUrl: z.string().url().optional().describe('OpenAI-compatible API base URL (OpenAI, vLLM, Ollama, llama.cpp server), e.g. https://api.openai.com/v1. Without it the paid route answers 503 not_configured.'),
        apiKey: z.string().optional().describe('API key for the LLM provider; falls back to OPENAI_API_KEY. Never logged.'),
        models: list(z.string().min(1)).prefault([]).describe('Models rotated across passes (pass i uses models[i mod n]). Comma-separated in the environment.'),
        passTimeout: duration().prefault('60s').describe('Time limit of one pass, including its one retry.'),
      })
      .prefault({}),
    x402: z
      .object({
        network: z.enum(['base', 'base-sepolia']).default('base').describe('Payment network preset: `base` (eip155:8453, USDC 0x8335…2913) or `base-sepolia` (eip155:84532, USDC 0x036C…CF7e).'),
        payTo: z
          .string()
          .regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address')
          .optional()
          .describe('Address that receives payments. Without it the paid routes answer 503 not_configured.'),
        facilitatorUrl: z.string().url().default('https://x402.org/facilitator').describe('x402 facilitator base URL (its /verify, /settle and /supported endpoints).'),
        facilitatorTimeout: duration().prefault('10s').describe('Time limit of one facilitator call.'),
        maxTimeoutSeconds: z.coerce.number().int().min(10).max(3600).default(300).describe('Longest validity window a payment authorization may have, advertised in the terms.'),
      })
      .prefault({}),
  })
  .prefault({});

export const verifyEnv: EnvBinding[] = [
  { env: 'ROOTBOX_VERIFY_SERVICE_NAME', path: 'verify.serviceName' },
  { env: 'ROOTBOX_LLM_BASE_URL', path: 'verify.llm.baseUrl' },
  { env: 'ROOTBOX_LLM_API_KEY', path: 'verify.llm.apiKey', fallback: 'OPENAI_API_KEY' },
  { env: 'ROOTBOX_LLM_MODELS', path: 'verify.llm.models' },
  { env: 'ROOTBOX_X402_NETWORK', path: 'verify.x402.network' },
  { env: 'ROOTBOX_PAY_TO', path: 'verify.x402.payTo' },
  { env: 'ROOTBOX_FACILITATOR_URL', path: 'verify.x402.facilitatorUrl' },
];
