// The x402 v2 wire format as zod schemas: PaymentRequirements (an `accepts` entry),
// PaymentRequired (the 402 terms), PaymentPayload (what the client sends, exact scheme with an
// EIP-3009 authorization) and the facilitator's VerifyResponse / SettleResponse / Supported.

import { z } from 'zod';

const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 20-byte hex address');
const uint = z.string().regex(/^\d{1,78}$/, 'must be a decimal integer string');

export const requirementsSchema = z.object({
  scheme: z.string().max(64),
  network: z.string().max(64),
  amount: uint,
  asset: z.string().max(128),
  payTo: z.string().max(128),
  maxTimeoutSeconds: z.number().int().nonnegative(),
  extra: z.record(z.string(), z.unknown()).optional(),
});
export type PaymentRequirements = z.infer<typeof requirementsSchema>;

export const resourceSchema = z.object({
  url: z.string().max(2048),
  description: z.string().max(1000).optional(),
  mimeType: z.string().max(200).optional(),
});
export type ResourceInfo = z.infer<typeof resourceSchema>;

export interface PaymentRequired {
  x402Version: 2;
  error?: string;
  resource: ResourceInfo;
  accepts: PaymentRequirements[];
  extensions?: Record<string, unknown>;
}

/** The JSON body of a 402 challenge (terms.ts): the terms beside the error code and detail. */
export const challengeBodySchema = z.object({
  x402Version: z.literal(2),
  resource: resourceSchema,
  accepts: z.array(requirementsSchema),
  error: z.string().describe('Stable error code: payment_required, or why the payment sent was refused.'),
  detail: z.string(),
});

export const authorizationSchema = z.object({
  from: address,
  to: address,
  value: uint,
  validAfter: uint,
  validBefore: uint,
  nonce: z.string().regex(/^0x[0-9a-fA-F]{64}$/, 'must be a 32-byte hex nonce'),
});
export type Authorization = z.infer<typeof authorizationSchema>;

export const exactEvmPayloadSchema = z.object({
  authorization: authorizationSchema,
  signature: z.string().regex(/^0x([0-9a-fA-F]{2}){65,4096}$/, 'must be a hex signature'),
});

export const paymentPayloadSchema = z.object({
  x402Version: z.literal(2, { error: 'x402Version must be 2' }),
  resource: resourceSchema.optional(),
  accepted: requirementsSchema,
  payload: exactEvmPayloadSchema,
  extensions: z.record(z.string(), z.unknown()).optional(),
});
export type PaymentPayload = z.infer<typeof paymentPayloadSchema>;

export const verifyResponseSchema = z.object({
  isValid: z.boolean(),
  invalidReason: z.string().nullish(),
  invalidMessage: z.string().nullish(),
  payer: z.string().nullish(),
});
export type VerifyResponse = z.infer<typeof verifyResponseSchema>;

export const settleResponseSchema = z.object({
  success: z.boolean(),
  errorReason: z.string().nullish(),
  errorMessage: z.string().nullish(),
  payer: z.string().nullish(),
  transaction: z.string(),
  network: z.string(),
  amount: z.string().nullish(),
});
export type SettleResponse = z.infer<typeof settleResponseSchema>;

export const supportedResponseSchema = z.object({
  kinds: z.array(z.object({ x402Version: z.number(), scheme: z.string(), network: z.string(), extra: z.record(z.string(), z.unknown()).nullish() })),
  extensions: z.array(z.string()).optional(),
  signers: z.record(z.string(), z.array(z.string())).optional(),
});
export type SupportedResponse = z.infer<typeof supportedResponseSchema>;
