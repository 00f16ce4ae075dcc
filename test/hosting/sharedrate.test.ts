// A request-rate limit counted across hosts (hosting/quotas.ts SharedRateLimit): requests that find
// no tokens leased from the registry's bucket share one round trip for them. Each taking a chunk of
// its own emptied the bucket — in CI, 16 concurrent creates from one address (a burst of 200, a
// chunk of 20 per round trip) got 429 'creates per hour' where the per-address cap of 3 was meant.
// A lease's unspent tokens go back when it lapses: a client whose every request finds the lease
// lapsed spends one token each (it spent a chunk each: 10 such creates emptied a bucket of any size).
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
    give: async (_key: string, n: number, burst: number) => {
      b.tokens = Math.min(burst, b.tokens + n);
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

test("a lapsed lease's unspent tokens go back to the shared bucket: one request per lease spends one token, not a chunk", async () => {
  const shared = bucket(200);
  shared.open();
  let now = 1_000_000;
  const limit = new SharedRateLimit('create', { burst: 200, perSecond: 0 }, shared as unknown as SharedQuotas, silentLogger, () => now);
  for (let i = 0; i < 30; i++) {
    const v = await limit.take(`127.0.30.${i % 3}`);
    assert.ok(v.ok, `request ${i}`);
    now += 6_000; // past the lease (5 s): the next request finds it lapsed
  }
  await limit.take('127.0.31.1'); // another key: the first three keys' leases lapse at their next use
  for (let i = 0; i < 3; i++) await limit.take(`127.0.30.${i}`);
  await new Promise((r) => setImmediate(r));
  // 34 spent (30 + 1 + 3); four leases held now, each a chunk of 20 less the one it spent
  assert.is(shared.tokens, 200 - 34 - 4 * 19);
});

test.run();
