// The capacity slice of the hosting config: how much this host takes before a new server goes
// elsewhere (cluster mode: the up host with the most room) or is refused 503 `at_capacity` (a
// single box). Room is counted from the servers' tier ceilings, not from what they use now
// (hosting/capacity.ts); the keys let an operator keep a host smaller than its machine — and a
// test make one "full".

import { z } from 'zod';

const bytes = (what: string) => z.coerce.number().int().min(0).optional().describe(what);

export const capacitySchema = z
  .strictObject({
    servers: z.coerce
      .number()
      .int()
      .min(0)
      .default(0)
      .describe('Most servers this host holds; a create beyond goes to another host (cluster mode) or answers 503 `at_capacity`. 0: no count limit.'),
    memory: bytes(
      "Bytes the memory ceilings of this host's servers (their tier's, spec part 8) may add up to; a create whose tier ceiling does not fit goes elsewhere or answers 503 `at_capacity`. Default: four times the machine's memory (a ceiling is a cap, not a reservation, and idle servers doze or sleep).",
    ),
    disk: bytes(
      "Bytes the disk ceilings of this host's servers may add up to (their disk images grow up to the ceiling, so no overcommit by default); room is also never more than the data dir's free space less 2 GiB. Default: the size of the data dir's filesystem.",
    ),
  })
  .prefault({});
