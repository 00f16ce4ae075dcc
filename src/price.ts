// What a metered period costs: the one billing formula, used by the single box's store
// (store/billing.ts, inside its LMDB transaction) and by the registry's ledger (registry/ledger.ts,
// inside its PostgreSQL transaction). RAM and egress draw on what is left of the account's grant
// first; disk and stored checkpoints are always paid. Amounts are kept to 9 decimal places (the ledger's numeric(24, 9)).

/** A dollar or usage figure to 9 decimal places, the precision every ledger keeps. */
export const round9 = (n: number): number => Math.round(n * 1e9) / 1e9;

export interface Prices {
  ramUsdPerGbHour: number;
  diskUsdPerGbMonth: number;
  egressUsdPerGb: number;
  /** Checkpoint storage, per GB-month (absent: an entry metered before checkpoints were billed). */
  checkpointUsdPerGbMonth?: number;
}

/** What an account may use for free (its tier's). */
export interface Grant {
  ramGbHours: number;
  egressGb: number;
}

/** One period's usage of one server. */
export interface PeriodUsage {
  ramGbHours: number;
  egressGb: number;
  diskGbMonths: number;
  /** GB-months of checkpoint storage (store/checkpoints.ts records' newBytes; absent: none). */
  checkpointGbMonths?: number;
}

/** The dollars one period costs, given what the account had already used of its grant before it. */
export function periodCost(period: PeriodUsage, usedBefore: Grant, grant: Grant, prices: Prices): number {
  const ramPaid = Math.max(0, period.ramGbHours - Math.max(0, grant.ramGbHours - usedBefore.ramGbHours));
  const egressPaid = Math.max(0, period.egressGb - Math.max(0, grant.egressGb - usedBefore.egressGb));
  const checkpoints = (period.checkpointGbMonths ?? 0) * (prices.checkpointUsdPerGbMonth ?? 0);
  return round9(ramPaid * prices.ramUsdPerGbHour + egressPaid * prices.egressUsdPerGb + period.diskGbMonths * prices.diskUsdPerGbMonth + checkpoints);
}
