// Public surface of the x402 payments module: a generic paywall (any amount, any resource),
// the facilitator port with its HTTP implementation (authenticated: CDP JWT or fixed headers)
// and self-settlement on chain, the health of payments, the reconciler of pending settlements,
// the header codec and the network presets.

export {
  Paywall,
  PAYMENT_EXPOSE_HEADERS,
  type PaywallOptions,
  type SharedPaymentLocks,
  type ChargeRequest,
  type VerifiedPayment,
  type Settlement,
  type Paid,
} from './paywall.js';
export { createPayments, type Payments, type X402Settings, type PaymentsOverrides } from './setup.js';
export { startPayments } from './part.js';
export { PaymentHealth, type PaymentState, type GasState } from './health.js';
export { facilitatorAuth, cdpJwt, cdpSigningKey, CDP_JWT_SECONDS, type FacilitatorAuth } from './auth.js';
export { SelfSettler, readGasKey } from './selfsettle.js';
export { paymentChecks, type PaymentCheck } from './doctor.js';
export { RpcChain, RpcUnreachable, RpcError, EIP3009_ABI, type Chain } from './chain.js';
export { Reconciler, EXPIRY_GRACE_SECONDS, type ReconcileSummary, type SettledListener } from './reconcile.js';
export { HttpFacilitator, FacilitatorError, type Facilitator, type SettleResult, type HttpFacilitatorOptions } from './facilitator.js';
export { encodeHeader, decodeHeader, safeJson, MAX_HEADER_BYTES } from './codec.js';
export { NETWORKS, networkOf, formatUsd, usdToAtomic, type NetworkName, type NetworkPreset } from './networks.js';
export type {
  PaymentPayload,
  PaymentRequired,
  PaymentRequirements,
  ResourceInfo,
  SettleResponse,
  VerifyResponse,
  SupportedResponse,
  Authorization,
} from './types.js';
export { requirementsSchema, paymentPayloadSchema, settleResponseSchema, verifyResponseSchema, challengeBodySchema } from './types.js';
export type { PaymentRecord, PaymentStatus } from '../store/index.js';
