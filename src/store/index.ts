// Public surface of the store: open it once, use the typed areas, close it on shutdown.
// This folder is the only user of LMDB. Opened in open.ts.

export { openStore, type Store } from './open.js';
export type { FeedbackRecord } from './feedback.js';
export type { CheckpointRecord, CheckpointStore } from './checkpoints.js';
export type { CertificateRecord, CertificateStore } from './certificates.js';
export type { ServerRecord, PendingOp, AccountHold, MoveTakeover } from './servers.js';
export type { RuntimeRecord, RuntimeStore } from './runtime.js';
export type { AccountRecord } from './accounts.js';
export type { PendingCode } from './codes.js';
export type { Exposure } from './exposures.js';
export type { DomainRecord, DomainState, DomainStore } from './domains.js';
export type { JoinMark, JoinStore } from './joined.js';
export type { LedgerEntry, Usage, BillingState, MeterCursor, Prices, Grant, OutboxEntry, OutboxKey } from './billing.js';
export { PaymentStore, paymentKey, type PaymentRecord, type PaymentStatus, type PaymentKey } from './payments.js';
export type { Migration } from './db.js';
export { backupStore, restoreStore, summarize as summarizeStore, holders as storeHolders, SCHEMA_VERSION, type StoreSummary, type Restored } from './backup.js';
