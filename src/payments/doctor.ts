// `rootbox doctor`'s payment rows: the same checks the daemon makes at start (health.ts) run once
// from the CLI — the facilitator's /supported with our credentials, or for self-settlement the
// gas key file, the RPC's chain, the token's EIP-712 domain and the gas wallet's balance.
// Optional rows: a host without payments still hosts.

import { parseEther } from 'viem';
import { facilitatorAuth } from './auth.js';
import { RpcChain } from './chain.js';
import { HttpFacilitator } from './facilitator.js';
import { chainProbe, facilitatorProbe, type Prober } from './health.js';
import { networkOf } from './networks.js';
import { readGasKey } from './selfsettle.js';
import type { X402Settings } from './setup.js';

export interface PaymentCheck {
  name: string;
  required: false;
  ok: boolean;
  detail: string;
  fix: string;
}

export async function paymentChecks(x: X402Settings): Promise<PaymentCheck[]> {
  const row = (ok: boolean, detail: string, fix = ''): PaymentCheck => ({ name: 'payments', required: false, ok, detail, fix });
  if (!x.payTo) return [row(false, 'not configured (no verify.x402.payTo): the paid routes answer 503', 'set verify.x402.payTo')];
  let probe: Prober;
  let what: string;
  try {
    const net = networkOf(x);
    if (x.settlement === 'self') {
      const wallet = readGasKey(x.gasKeyFile ?? '');
      probe = chainProbe(new RpcChain(x.rpcUrl ?? '', net.asset, x.facilitatorTimeout), net, wallet.address, parseEther(x.minGasBalance ?? '0'));
      what = `self-settlement on ${net.network}, gas wallet ${wallet.address}`;
    } else {
      const fac = new HttpFacilitator({ url: x.facilitatorUrl, timeoutMs: x.facilitatorTimeout, settleTimeoutMs: x.settleTimeout, auth: facilitatorAuth(x) });
      probe = facilitatorProbe(fac, net, new URL(x.facilitatorUrl).origin);
      what = `facilitator ${new URL(x.facilitatorUrl).origin} (auth ${x.facilitatorAuth}) on ${net.network}`;
    }
  } catch (e) {
    return [row(false, (e as Error).message, 'fix verify.x402 in the config')];
  }
  const p = await probe();
  if (p.blocking.length) return [row(false, `${what}: ${p.blocking.join('; ')}`, 'the paid routes answer 503 payments_unavailable until this is fixed')];
  if (p.notes.length) return [row(false, `${what}: ${p.notes.join('; ')}`, 'check the network path to it')];
  return [row(true, `${what}: usable${p.gas ? `, gas ${p.gas.balance_eth} ETH (min ${p.gas.min_eth})` : ''}`)];
}
