// Builds the payments module from the x402 config slice: the HTTP facilitator client, the
// paywall and the reconciler of pending settlements (start/stop it with the daemon).

import type { Logger } from '../log/index.js';
import type { PaymentStore } from '../store/index.js';
import { HttpFacilitator, type Facilitator } from './facilitator.js';
import { NETWORKS, type NetworkName } from './networks.js';
import { Paywall } from './paywall.js';
import { Reconciler } from './reconcile.js';

export interface X402Settings {
  network: NetworkName;
  payTo?: string;
  facilitatorUrl: string;
  facilitatorTimeout: number;
  settleTimeout: number;
  reconcileInterval: number;
  maxTimeoutSeconds: number;
}

export interface Payments {
  paywall: Paywall;
  reconciler: Reconciler;
  facilitator: Facilitator;
  /** Starts the periodic reconciliation of pending settlements. */
  start(): void;
  stop(): Promise<void>;
}

export function createPayments(x: X402Settings, store: PaymentStore, log: Logger, facilitator?: Facilitator): Payments {
  const fac = facilitator ?? new HttpFacilitator({ url: x.facilitatorUrl, timeoutMs: x.facilitatorTimeout, settleTimeoutMs: x.settleTimeout });
  const paywall = new Paywall({ net: NETWORKS[x.network], payTo: x.payTo, maxTimeoutSeconds: x.maxTimeoutSeconds, facilitator: fac, store, log });
  const reconciler = new Reconciler({ facilitator: fac, store, log });
  return {
    paywall,
    reconciler,
    facilitator: fac,
    start: () => reconciler.start(x.reconcileInterval),
    stop: () => reconciler.stop(),
  };
}
