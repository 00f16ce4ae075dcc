// The billing slice of the config: prices, the free grant, the metering period and the grace
// before suspension.

import { z } from 'zod';
import { duration } from './fields.js';
import type { EnvBinding } from './env.js';

export const billingSchema = z
  .strictObject({
    ramUsdPerGbHour: z.coerce.number().min(0).default(0.005).describe('Price of RAM while a server is awake, per GB-hour of memory in use.'),
    diskUsdPerGbMonth: z.coerce.number().min(0).default(0.25).describe('Price of disk actually used, per GB-month (a month is 730 hours).'),
    checkpointUsdPerGbMonth: z.coerce
      .number()
      .min(0)
      .default(0.05)
      .describe(
        "Price of checkpoint storage, per GB-month, always paid like disk (the free grant does not cover it). An account's stored bytes are the bytes each of its servers' checkpoints added to the store when taken (its new, deduplicated, encrypted chunks; a chunk shared with an earlier checkpoint is counted once, by the checkpoint that stored it).",
      ),
    egressUsdPerGb: z.coerce.number().min(0).default(0.05).describe('Price of traffic sent out by servers, per GB, once the egress grant is used.'),
    grantRamGbHours: z.coerce.number().min(0).default(50).describe('Free RAM GB-hours of an anonymous account.'),
    grantEgressGb: z.coerce.number().min(0).default(2).describe('Free egress GB of an anonymous account.'),
    verifiedGrantRamGbHours: z.coerce
      .number()
      .min(0)
      .default(500)
      .describe('Free RAM GB-hours of a phone-verified account (replaces the anonymous grant once the phone is proven).'),
    verifiedGrantEgressGb: z.coerce.number().min(0).default(20).describe('Free egress GB of a phone-verified account.'),
    meterInterval: duration().prefault('1m').describe('How often usage is measured and written to the ledger.'),
    suspendAfter: duration().prefault('48h').describe("How long after the grant and balance run out an account's servers are suspended."),
    maxRechargeUsd: z.coerce.number().min(1).default(1000).describe('Largest amount one POST /account/recharge may add.'),
  })
  .prefault({});

export const billingEnv: EnvBinding[] = [
  { env: 'ROOTBOX_RAM_USD_PER_GB_HOUR', path: 'billing.ramUsdPerGbHour' },
  { env: 'ROOTBOX_DISK_USD_PER_GB_MONTH', path: 'billing.diskUsdPerGbMonth' },
  { env: 'ROOTBOX_CHECKPOINT_USD_PER_GB_MONTH', path: 'billing.checkpointUsdPerGbMonth' },
  { env: 'ROOTBOX_EGRESS_USD_PER_GB', path: 'billing.egressUsdPerGb' },
  { env: 'ROOTBOX_GRANT_RAM_GB_HOURS', path: 'billing.grantRamGbHours' },
  { env: 'ROOTBOX_GRANT_EGRESS_GB', path: 'billing.grantEgressGb' },
  { env: 'ROOTBOX_METER_INTERVAL', path: 'billing.meterInterval' },
];
