// The verification slice of the config: LLM provider and pass tuning, x402 payment terms and
// network (presets or a custom chain), facilitator and its authentication, settlement through the
// facilitator or on-chain by the host itself (self), and settlement reconciliation.

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
          .enum(['base', 'base-sepolia', 'custom'])
          .default('base')
          .describe(
            'Payment network preset: `base` (eip155:8453, USDC 0x8335…2913), `base-sepolia` (eip155:84532, USDC 0x036C…CF7e), or `custom` (any EVM chain and EIP-3009 token: set chainId, asset, assetName and assetVersion).',
          ),
        chainId: z.coerce
          .number()
          .int()
          .min(1)
          .optional()
          .describe('Chain id of the `custom` network (e.g. 31337 for a local anvil); the wire network is eip155:<chainId>.'),
        asset: z
          .string()
          .regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte hex address')
          .optional()
          .describe('EIP-3009 token contract of the `custom` network.'),
        assetName: z.string().min(1).optional().describe("EIP-712 domain name of the `custom` network's token (USDC's is `USD Coin`)."),
        assetVersion: z.string().min(1).optional().describe("EIP-712 domain version of the `custom` network's token (USDC's is `2`)."),
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
        facilitatorAuth: z
          .enum(['none', 'cdp', 'headers'])
          .default('none')
          .describe(
            'How requests to the facilitator are authenticated: `none`, `cdp` (a fresh ES256/Ed25519 JWT per request from cdpKeyId and cdpKeySecret, as the Coinbase CDP facilitator requires) or `headers` (facilitatorHeaders sent as they are).',
          ),
        cdpKeyId: z.string().min(1).optional().describe('CDP API key id (facilitatorAuth `cdp`); becomes the JWT `kid` and `sub`.'),
        cdpKeySecret: z
          .string()
          .min(1)
          .optional()
          .describe('CDP API key secret (facilitatorAuth `cdp`): an EC private key in PEM (ES256) or a base64 Ed25519 key (EdDSA). Never logged.'),
        facilitatorHeaders: z
          .preprocess(
            (v) => {
              if (typeof v !== 'string') return v;
              try {
                return JSON.parse(v);
              } catch {
                return v;
              }
            },
            z.record(z.string().regex(/^[A-Za-z0-9-]{1,64}$/, 'must be an HTTP header name'), z.string().max(4096)),
          )
          .prefault({})
          .describe(
            'Headers sent with every facilitator request (facilitatorAuth `headers`), e.g. {"Authorization": "Bearer …"}; a JSON object in the environment. Values are never logged.',
          ),
        supportedInterval: duration()
          .prefault('5m')
          .describe(
            "How often the facilitator's /supported list (facilitator settlement) or the chain, token and gas wallet (self settlement) are checked; while our scheme and network are not usable the paid routes answer 503 payments_unavailable.",
          ),
        settlement: z
          .enum(['facilitator', 'self'])
          .default('facilitator')
          .describe(
            '`facilitator`: /verify and /settle through facilitatorUrl. `self`: no facilitator; chain state is checked through rpcUrl before the work and transferWithAuthorization is submitted from the gas wallet after it.',
          ),
        rpcUrl: z.string().url().optional().describe('JSON-RPC URL of the chain (settlement `self`).'),
        gasKeyFile: z
          .string()
          .optional()
          .describe(
            'File holding the hex private key of the wallet that pays gas for self-settlement (mode 0600 or stricter, refused otherwise). Never logged.',
          ),
        minGasBalance: z
          .string()
          .regex(/^\d{1,12}(\.\d{1,18})?$/, 'must be an amount of the native coin, e.g. 0.0005')
          .default('0.0005')
          .describe('Native-coin balance (ETH) the gas wallet must keep; below it the paid routes answer 503 payments_unavailable and a warning is logged.'),
        facilitatorTimeout: duration()
          .prefault('10s')
          .describe('Time limit of one facilitator /verify or /supported call (settlement `self`: of the chain checks made before the work).'),
        settleTimeout: duration()
          .prefault('30s')
          .describe(
            'Time limit of one facilitator /settle call (settlement `self`: of submitting the transaction and waiting for its receipt); when it passes the outcome is unknown, the settlement is recorded as pending and reconciled later.',
          ),
        reconcileInterval: duration()
          .prefault('30s')
          .describe(
            'How often pending settlements (unknown outcome) are finished: retried with the facilitator, or (settlement `self`) read from the receipt and authorizationState, the same signed transaction re-broadcast if the node lost it; until settled, refused or expired. At start-up a pass runs at once, after resolving the payments a stopped daemon left locked (abandoned: nothing had been sent for settlement; settled when self-settlement finds the authorization used on chain by a transfer).',
          ),
        maxTimeoutSeconds: z.coerce
          .number()
          .int()
          .min(10)
          .max(3600)
          .default(300)
          .describe('Longest validity window a payment authorization may have, advertised in the terms.'),
      })
      .prefault({})
      .superRefine((x, ctx) => {
        if (x.network === 'custom')
          for (const k of ['chainId', 'asset', 'assetName', 'assetVersion'] as const)
            if (x[k] === undefined) ctx.addIssue({ code: 'custom', path: [k], message: `is required with network custom` });
        if (x.facilitatorAuth === 'cdp')
          for (const k of ['cdpKeyId', 'cdpKeySecret'] as const)
            if (x[k] === undefined) ctx.addIssue({ code: 'custom', path: [k], message: `is required with facilitatorAuth cdp` });
        if (x.settlement === 'self')
          for (const k of ['rpcUrl', 'gasKeyFile'] as const)
            if (x[k] === undefined) ctx.addIssue({ code: 'custom', path: [k], message: `is required with settlement self` });
      }),
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
  { env: 'ROOTBOX_X402_CHAIN_ID', path: 'verify.x402.chainId' },
  { env: 'ROOTBOX_X402_ASSET', path: 'verify.x402.asset' },
  { env: 'ROOTBOX_X402_ASSET_NAME', path: 'verify.x402.assetName' },
  { env: 'ROOTBOX_X402_ASSET_VERSION', path: 'verify.x402.assetVersion' },
  { env: 'ROOTBOX_FACILITATOR_AUTH', path: 'verify.x402.facilitatorAuth' },
  { env: 'ROOTBOX_CDP_KEY_ID', path: 'verify.x402.cdpKeyId', fallback: 'CDP_API_KEY_ID' },
  { env: 'ROOTBOX_CDP_KEY_SECRET', path: 'verify.x402.cdpKeySecret', fallback: 'CDP_API_KEY_SECRET' },
  { env: 'ROOTBOX_FACILITATOR_HEADERS', path: 'verify.x402.facilitatorHeaders' },
  { env: 'ROOTBOX_X402_SETTLEMENT', path: 'verify.x402.settlement' },
  { env: 'ROOTBOX_X402_RPC_URL', path: 'verify.x402.rpcUrl' },
  { env: 'ROOTBOX_X402_GAS_KEY_FILE', path: 'verify.x402.gasKeyFile' },
  { env: 'ROOTBOX_X402_MIN_GAS_BALANCE', path: 'verify.x402.minGasBalance' },
];
