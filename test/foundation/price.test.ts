// The one billing formula (src/price.ts) that the single box's store and the registry's ledger
// both charge with: RAM and egress draw on what is left of the grant first, disk is always paid.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { periodCost } from '../../src/price.js';

const prices = { ramUsdPerGbHour: 0.01, diskUsdPerGbMonth: 0.1, egressUsdPerGb: 0.05 };
const grant = { ramGbHours: 10, egressGb: 1 };

test('a period inside what is left of the grant costs only its disk', () => {
  const usd = periodCost({ ramGbHours: 2, egressGb: 0.5, diskGbMonths: 0.01 }, { ramGbHours: 3, egressGb: 0 }, grant, prices);
  assert.is(usd, 0.001);
});

test('a period that crosses the end of the grant pays only the part past it', () => {
  // 1 GB-hour of RAM and 0.25 GB of egress left; the period uses 3 and 0.75
  const usd = periodCost({ ramGbHours: 3, egressGb: 0.75, diskGbMonths: 0 }, { ramGbHours: 9, egressGb: 0.75 }, grant, prices);
  assert.is(usd, 0.045); // 2 × 0.01 + 0.5 × 0.05
});

test('usage already past the grant pays in full, to 9 decimal places', () => {
  const usd = periodCost({ ramGbHours: 1 / 3, egressGb: 0, diskGbMonths: 0 }, { ramGbHours: 50, egressGb: 5 }, grant, prices);
  assert.is(usd, 0.003333333);
});

test.run();
