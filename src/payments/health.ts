// Whether payments can be taken right now, checked at start and every supportedInterval.
// Facilitator settlement: GET /supported must list x402 v2 `exact` on our network (a 401/403
// means our credentials are refused). Self-settlement: the RPC's chain id, the token's EIP-712
// domain separator against the configured name/version/chain/contract, and the gas wallet's
// balance against minGasBalance. A blocking problem makes the paid routes answer 503
// payments_unavailable before any work; a check that could not run (the service did not answer)
// is shown but does not block (the payment's own calls then fail with 502). Changes are logged.

import { formatEther, hashDomain, type Hex } from 'viem';
import type { Logger } from '../log/index.js';
import { RpcUnreachable, type Chain } from './chain.js';
import { FacilitatorError, type Facilitator } from './facilitator.js';
import type { NetworkPreset } from './networks.js';

export interface GasState {
  address: string;
  balance_eth: string | null;
  min_eth: string;
  ok: boolean | null;
}

export interface PaymentState {
  settlement: 'facilitator' | 'self';
  /** false: the paid routes answer 503 payments_unavailable. */
  available: boolean;
  /** Why payments are unavailable, or checks that could not run. */
  problems: string[];
  checked_at: string | null;
  gas_wallet?: GasState;
}

interface Probe {
  blocking: string[];
  notes: string[];
  gas?: GasState;
}

export type Prober = () => Promise<Probe>;

/** /supported must list x402Version 2, scheme exact, our network. */
export function facilitatorProbe(fac: Facilitator, net: NetworkPreset, origin: string): Prober {
  return async () => {
    try {
      const s = await fac.supported();
      const ok = s.kinds.some((k) => k.x402Version === 2 && k.scheme === 'exact' && k.network === net.network);
      if (ok) return { blocking: [], notes: [] };
      const listed = s.kinds.filter((k) => k.x402Version === 2).map((k) => `${k.scheme}/${k.network}`);
      return {
        blocking: [
          `the facilitator ${origin} does not support x402 v2 exact on ${net.network} (it lists ${listed.slice(0, 8).join(', ') || 'nothing for v2'})`,
        ],
        notes: [],
      };
    } catch (e) {
      if (e instanceof FacilitatorError && (e.status === 401 || e.status === 403))
        return { blocking: [`the facilitator ${origin} refused our credentials (${e.status}); check verify.x402.facilitatorAuth and its key`], notes: [] };
      return { blocking: [], notes: [`the facilitator's /supported could not be read: ${(e as Error).message.slice(0, 200)}`] };
    }
  };
}

const EIP712_DOMAIN = [
  { name: 'name', type: 'string' },
  { name: 'version', type: 'string' },
  { name: 'chainId', type: 'uint256' },
  { name: 'verifyingContract', type: 'address' },
] as const;

/** Chain id, the token's EIP-712 domain, the gas wallet's balance. */
export function chainProbe(chain: Chain, net: NetworkPreset, gasAddress: Hex, minGasWei: bigint): Prober {
  const want = hashDomain({
    domain: { name: net.eip712.name, version: net.eip712.version, chainId: BigInt(net.chainId), verifyingContract: net.asset },
    types: { EIP712Domain: EIP712_DOMAIN },
  });
  return async () => {
    const blocking: string[] = [];
    const gas: GasState = { address: gasAddress, balance_eth: null, min_eth: formatEther(minGasWei), ok: null };
    try {
      const [id, sep, bal] = await Promise.all([
        chain.chainId(),
        chain.domainSeparator().catch((e) => (e instanceof RpcUnreachable ? Promise.reject(e) : null)),
        chain.nativeBalance(gasAddress),
      ]);
      if (id !== net.chainId) blocking.push(`the RPC serves chain ${id}, the network is ${net.network}`);
      else if (sep === null) blocking.push(`${net.asset} on chain ${id} has no DOMAIN_SEPARATOR(); it is not an EIP-3009 token`);
      else if (sep.toLowerCase() !== want.toLowerCase())
        blocking.push(
          `the token's EIP-712 domain is not {name ${JSON.stringify(net.eip712.name)}, version ${JSON.stringify(net.eip712.version)}, chain ${net.chainId}, ${net.asset}}`,
        );
      gas.balance_eth = formatEther(bal);
      gas.ok = bal >= minGasWei;
      if (!gas.ok) blocking.push(`the gas wallet ${gasAddress} holds ${gas.balance_eth} ETH, below minGasBalance ${gas.min_eth}; fund it`);
      return { blocking, notes: [], gas };
    } catch (e) {
      return { blocking: [], notes: [`the chain could not be read: ${(e as Error).message.slice(0, 200)}`], gas };
    }
  };
}

export class PaymentHealth {
  private state: PaymentState;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    private readonly probe: Prober | undefined,
    settlement: 'facilitator' | 'self',
    private readonly log: Logger,
  ) {
    this.state = { settlement, available: true, problems: [], checked_at: null };
  }

  get view(): PaymentState {
    return this.state;
  }

  /** The reason the paid routes must refuse now, if any. */
  refusal(): string | undefined {
    return this.state.available ? undefined : this.state.problems.join('; ');
  }

  /** One check; concurrent calls share it. Never throws. */
  check(): Promise<void> {
    if (!this.probe) return Promise.resolve();
    const probe = this.probe;
    this.running ??= (async () => {
      const p = await probe().catch((e) => ({ blocking: [], notes: [`payment check failed: ${(e as Error).message}`] }) as Probe);
      const before = this.state;
      this.state = {
        settlement: before.settlement,
        available: p.blocking.length === 0,
        problems: [...p.blocking, ...p.notes],
        checked_at: new Date().toISOString(),
        ...(p.gas ? { gas_wallet: p.gas } : {}),
      };
      if (p.blocking.join() !== (before.available ? '' : before.problems.join())) {
        if (p.blocking.length) this.log.warn('payments unavailable: the paid routes answer 503', { problems: p.blocking });
        else if (before.checked_at) this.log.info('payments available again');
      }
      if (p.notes.length && p.notes.join() !== before.problems.join()) this.log.warn('payment check incomplete', { problems: p.notes });
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  start(intervalMs: number): void {
    if (!this.probe) return;
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
