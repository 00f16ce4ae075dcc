// Payment network presets: CAIP-2 network id, chain id, the USDC contract and its EIP-712
// domain (name, version) that signatures are made against; or a `custom` network from config
// (any EVM chain id and EIP-3009 token, e.g. a local anvil with a freshly deployed token).

export type NetworkName = 'base' | 'base-sepolia';

export interface NetworkPreset {
  name: NetworkName | 'custom';
  /** CAIP-2 id used on the wire, e.g. eip155:8453. */
  network: `eip155:${number}`;
  chainId: number;
  /** ERC-20 (EIP-3009) token contract. */
  asset: `0x${string}`;
  /** EIP-712 domain of the token. */
  eip712: { name: string; version: string };
  decimals: number;
}

export const NETWORKS: Readonly<Record<NetworkName, NetworkPreset>> = Object.freeze({
  base: {
    name: 'base',
    network: 'eip155:8453',
    chainId: 8453,
    asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    eip712: { name: 'USD Coin', version: '2' },
    decimals: 6,
  },
  'base-sepolia': {
    name: 'base-sepolia',
    network: 'eip155:84532',
    chainId: 84532,
    asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    eip712: { name: 'USDC', version: '2' },
    decimals: 6,
  },
});

export interface NetworkSettings {
  network: NetworkName | 'custom';
  chainId?: number;
  asset?: string;
  assetName?: string;
  assetVersion?: string;
}

/** The preset, or the custom network the config describes (its keys are checked by the config schema). */
export function networkOf(x: NetworkSettings): NetworkPreset {
  if (x.network !== 'custom') return NETWORKS[x.network];
  if (!x.chainId || !x.asset || !x.assetName || !x.assetVersion) throw new Error('network custom needs chainId, asset, assetName and assetVersion');
  return {
    name: 'custom',
    network: `eip155:${x.chainId}`,
    chainId: x.chainId,
    asset: x.asset as `0x${string}`,
    eip712: { name: x.assetName, version: x.assetVersion },
    decimals: 6,
  };
}

/** Formats an atomic amount as dollars, e.g. 60000 → "$0.06" (USDC has 6 decimals). */
export function formatUsd(atomic: bigint, decimals = 6): string {
  const unit = 10n ** BigInt(decimals);
  const whole = atomic / unit;
  let frac = (atomic % unit).toString().padStart(decimals, '0').replace(/0+$/, '');
  if (frac.length < 2) frac = frac.padEnd(2, '0');
  return `$${whole}.${frac}`;
}

/** Parses "$0.06", "0.06" or 5 into atomic units; null when not a positive amount. */
export function usdToAtomic(usd: string | number, decimals = 6): bigint | null {
  const s = typeof usd === 'number' ? (Number.isFinite(usd) ? usd.toFixed(decimals) : '') : usd.trim().replace(/^\$/, '');
  const m = /^(\d{1,12})(?:\.(\d+))?$/.exec(s);
  if (!m) return null;
  const frac = (m[2] ?? '').replace(/0+$/, '');
  if (frac.length > decimals) return null;
  const v = BigInt(m[1]) * 10n ** BigInt(decimals) + BigInt(frac.padEnd(decimals, '0') || '0');
  return v > 0n ? v : null;
}
