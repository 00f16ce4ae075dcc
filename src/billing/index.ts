// Billing: the metering loop, credits and the grant, running out (envelope, suspension),
// recharge through x402 and host-side credit, the usage ledger, and egress counted where bytes
// are written (egress.ts). Routes are mounted by the hosting API; this module owns their logic.
// Servers' ceilings follow their account's tier through the keeper hosting registers
// (keepTiers); settled recharges arrive from the payments reconciler.

export { creditsOf, isExhausted, upgradeEnvelope, type Credits } from './credits.js';
export { Meter, runtimeUsage, type UsageSample, type UsageSource } from './meter.js';
export { storedCheckpointBytes } from './stored.js';
export { EgressMeter, type EgressSink } from './egress.js';
export { LocalBook, RegistryBook, type MoneyBook, type SharedLedger, type SharedMoney } from './book.js';
export { ADMIN_SOURCE_RE, adminCreditOffline, resolveCredit } from './admin.js';
export { OPERATOR_SUSPENDED } from './enforce.js';
export { Billing, createBilling, type BillingConfig, type BillingDeps, type TierKeeper } from './service.js';
