// The verification tiers: passes and price per call (atomic USDC units, 6 decimals).

export type TierName = 'quick' | 'standard' | 'deep';

export interface Tier {
  name: TierName;
  passes: number;
  amount: bigint;
  price: string;
}

export const TIERS: Readonly<Record<TierName, Tier>> = Object.freeze({
  quick: { name: 'quick', passes: 3, amount: 60_000n, price: '$0.06' },
  standard: { name: 'standard', passes: 5, amount: 100_000n, price: '$0.10' },
  deep: { name: 'deep', passes: 10, amount: 200_000n, price: '$0.20' },
});

export const TIER_NAMES = Object.keys(TIERS) as TierName[];

export const tierOf = (name: string): Tier | undefined => (Object.hasOwn(TIERS, name) ? TIERS[name as TierName] : undefined);

export const MAX_ARTIFACT = 100_000;
export const MAX_RUBRIC = 10_000;

export const DEFAULT_RUBRIC =
  'Verify that the artifact is complete, internally consistent and actually does what it claims; check for errors, placeholder content and unsubstantiated claims.';
