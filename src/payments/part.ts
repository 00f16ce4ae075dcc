// The daemon's payments part (main.ts): built from verify.x402 over the store's payment records,
// then started (health checks, reconciliation of pending settlements).

import type { Config } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { PaymentStore } from '../store/index.js';
import type { SharedPaymentLocks } from './paywall.js';
import { createPayments, type Payments } from './setup.js';

export async function startPayments(d: {
  cfg: Readonly<Pick<Config, 'verify'>>;
  store: { payments: PaymentStore };
  log: Logger;
  /** Cluster mode: the registry, whose payment locks every host sees. */
  registry?: { payments: SharedPaymentLocks };
  /** The daemon's clock (a test's, moved instead of waited for). */
  now?: () => number;
}): Promise<Payments> {
  const payments = createPayments(d.cfg.verify.x402, d.store.payments, d.log.child({ part: 'payments' }), { shared: d.registry?.payments, now: d.now });
  await payments.start();
  return payments;
}
