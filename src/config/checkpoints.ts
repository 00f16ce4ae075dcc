// The checkpoints slice of the config (issue 37): when automatic checkpoints are taken, how many
// are kept, how many manual ones a server of each tier may hold, and how often the collector looks for chunks no checkpoint references. Where
// checkpoints are stored (`store`, `s3`) is checkpoints-s3.ts's part, spread in here.

import { z } from 'zod';
import { checkpointStoreEnv, checkpointStoreShape } from './checkpoints-s3.js';
import type { EnvBinding } from './env.js';
import { duration } from './fields.js';

const manualCap = (who: string, n: number) =>
  z.coerce
    .number()
    .int('must be a whole number')
    .min(0)
    .max(10_000)
    .default(n)
    .describe(
      `Manual checkpoints one server of ${who} may hold (POST /servers/{id}/checkpoints answers 429 \`checkpoint_limit\` beyond, and so does a fork that takes one; delete one to take another). Automatic ones do not count.`,
    );

export const checkpointsSchema = z
  .strictObject({
    ...checkpointStoreShape,
    interval: duration()
      .prefault('15m')
      .describe(
        "A running server that wrote to its disk since its last checkpoint gets an automatic one this often (and one when it goes to sleep, so a sleeping server's newest checkpoint holds all it wrote). 0 turns automatic checkpoints off.",
      ),
    keep: z.coerce
      .number()
      .int('must be a whole number')
      .min(1)
      .max(100)
      .default(3)
      .describe('Automatic checkpoints kept per server (the oldest goes when a new one is taken); manual ones are kept until deleted.'),
    manualPerServer: z
      .strictObject({
        anonymous: manualCap('an anonymous account (no verified phone)', 3),
        verified: manualCap('a phone-verified account', 10),
        paid: manualCap('an account with a positive balance', 50),
      })
      .prefault({}),
    gcInterval: duration()
      .prefault('1h')
      .describe(
        'How often chunks that no checkpoint references any more (deleted ones, superseded automatic ones, one cut off by a crash) are removed from the store; also once at each start, so what a crash cut off goes at once. 0: never.',
      ),
  })
  .prefault({});

export const checkpointsEnv: EnvBinding[] = [
  ...checkpointStoreEnv,
  { env: 'ROOTBOX_CHECKPOINT_INTERVAL', path: 'checkpoints.interval' },
  { env: 'ROOTBOX_CHECKPOINT_KEEP', path: 'checkpoints.keep' },
];
