// Builds the payments module from the x402 config slice: the settler (the HTTP facilitator with
// its authentication, or self-settlement on chain through an RPC URL and a gas wallet), the
// paywall, the reconciler of pending settlements, and the health check that keeps the paid
// routes at 503 while payments cannot work. start/stop it with the daemon.

import { parseEther } from 'viem';
import type { Logger } from '../log/index.js';
import type { PaymentStore } from '../store/index.js';
import { facilitatorAuth, type AuthSettings } from './auth.js';
import { RpcChain, type Chain } from './chain.js';
import { HttpFacilitator, type Facilitator } from './facilitator.js';
import { chainProbe, facilitatorProbe, PaymentHealth, type Prober } from './health.js';
import { networkOf, type NetworkSettings } from './networks.js';
import { Paywall, type SharedPaymentLocks } from './paywall.js';
import { Reconciler } from './reconcile.js';
import { readGasKey, SelfSettler } from './selfsettle.js';

export interface X402Settings extends NetworkSettings, AuthSettings {
  payTo?: string;
  facilitatorUrl: string;
  facilitatorTimeout: number;
  settleTimeout: number;
  reconcileInterval: number;
  maxTimeoutSeconds: number;
  supportedInterval?: number;
  settlement?: 'facilitator' | 'self';
  rpcUrl?: string;
  gasKeyFile?: string;
  minGasBalance?: string;
}

export interface Payments {
  paywall: Paywall;
  reconciler: Reconciler;
  facilitator: Facilitator;
  health: PaymentHealth;
  /** Checks the facilitator or chain once (bounded by its timeouts), then periodically; starts reconciliation. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

const origin = (url: string) => {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
};

/** Extra pieces tests may pass: a facilitator or chain of their own. */
export interface PaymentsOverrides {
  facilitator?: Facilitator;
  chain?: Chain;
  /** Cluster mode: payment locks shared by every host. */
  shared?: SharedPaymentLocks;
  /** The clock authorizations' validity is checked against (the daemon's; Date.now when not given). */
  now?: () => number;
}

export function createPayments(x: X402Settings, store: PaymentStore, log: Logger, over: PaymentsOverrides | Facilitator = {}): Payments {
  const o: PaymentsOverrides = 'verify' in over ? { facilitator: over } : over;
  const net = networkOf(x);
  const settlement = x.settlement ?? 'facilitator';
  let fac: Facilitator;
  let probe: Prober | undefined;
  let health: PaymentHealth | undefined;
  let lastRefresh = 0;
  if (o.facilitator) fac = o.facilitator;
  else if (settlement === 'self') {
    if (!x.rpcUrl || !x.gasKeyFile) throw new Error('verify.x402.settlement self needs rpcUrl and gasKeyFile');
    const wallet = readGasKey(x.gasKeyFile);
    const chain = o.chain ?? new RpcChain(x.rpcUrl, net.asset, x.facilitatorTimeout);
    fac = new SelfSettler({
      chain,
      wallet,
      chainId: net.chainId,
      network: net.network,
      token: net.asset,
      settleTimeoutMs: x.settleTimeout,
      log,
      now: o.now,
      onMined: () => {
        if (Date.now() - lastRefresh < 5000) return;
        lastRefresh = Date.now();
        void health?.check();
      },
    });
    if (x.payTo) probe = chainProbe(chain, net, wallet.address, parseEther(x.minGasBalance ?? '0'));
  } else {
    fac = new HttpFacilitator({ url: x.facilitatorUrl, timeoutMs: x.facilitatorTimeout, settleTimeoutMs: x.settleTimeout, auth: facilitatorAuth(x) });
    if (x.payTo) probe = facilitatorProbe(fac, net, origin(x.facilitatorUrl));
  }
  health = new PaymentHealth(probe, settlement, log);
  const paywall = new Paywall({
    net,
    payTo: x.payTo,
    maxTimeoutSeconds: x.maxTimeoutSeconds,
    facilitator: fac,
    store,
    log,
    health,
    settlement,
    shared: o.shared,
    now: o.now,
  });
  const reconciler = new Reconciler({ facilitator: fac, store, log, now: o.now, busy: (rec) => paywall.settling(rec) });
  const h = health;
  return {
    paywall,
    reconciler,
    facilitator: fac,
    health: h,
    async start() {
      // the first check is awaited a short while (bounded by its own timeouts anyway), so a daemon that
      // starts against a facilitator or chain that is down is not held back
      await Promise.race([h.check(), new Promise((r) => setTimeout(r, 3000).unref())]);
      h.start(x.supportedInterval ?? 300_000);
      reconciler.start(x.reconcileInterval);
    },
    async stop() {
      await h.stop();
      await reconciler.stop();
    },
  };
}
