// A request-rate limit counted across hosts (hosting/quotas.ts SharedRateLimit): requests that find
// no tokens leased from the registry's bucket share one round trip for them. Each taking a chunk of
// its own emptied the bucket — in CI, 16 concurrent creates from one address (a burst of 200, a
// chunk of 20 per round trip) got 429 'creates per hour' where the per-address cap of 3 was meant.
// The shared bucket here is the registry's rule in memory, its round trip held until all ask.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SharedRateLimit, type SharedQuotas } from '../../src/hosting/quotas.js';
import { silentLogger } from '../../src/log/index.js';
import type { Verdict } from '../../src/ratelimit.js';

/** The registry's bucket for one key (no refill within the test), counting round trips; each answer waits for `open`. */
function bucket(tokens: number) {
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const b = {
    tokens,
    trips: 0,
    open,
    take: async (_key: string, _burst: number, _perSecond: number, want: number) => {
      b.trips++;
      await gate;
      const granted = Math.min(want, Math.floor(b.tokens));
      b.tokens -= granted;
      return { granted, retryAfter: granted ? 0 : 18 };
    },
  };
  return b;
}

test('16 concurrent requests with no lease share one round trip: a burst of 200 lets all 16 through', async () => {
  const shared = bucket(200);
  const limit = new SharedRateLimit('create', { burst: 200, perSecond: 200 / 3600 }, shared as unknown as SharedQuotas, silentLogger);
  const verdicts = Array.from({ length: 16 }, () => limit.take('127.0.30.1'));
  shared.open();
  const all = (await Promise.all(verdicts)) as Verdict[];
  assert.equal(
    all.map((v) => v.ok),
    Array(16).fill(true),
  );
  assert.ok(shared.trips <= 1, `${shared.trips} round trips`);
  assert.is(shared.tokens, 200 - 20, 'one chunk of a tenth of the burst taken');
});

test('when the shared bucket is empty every waiting request is refused with its Retry-After', async () => {
  const shared = bucket(0);
  const limit = new SharedRateLimit('create', { burst: 200, perSecond: 200 / 3600 }, shared as unknown as SharedQuotas, silentLogger);
  const verdicts = Array.from({ length: 4 }, () => limit.take('127.0.30.9'));
  shared.open();
  const all = (await Promise.all(verdicts)) as Verdict[];
  assert.equal(
    all.map((v) => [v.ok, v.retryAfter]),
    Array(4).fill([false, 18]),
  );
});

test.run();
