// The retry copies of forwarded request bodies (src/channel/body.ts): the budget per source (an
// IPv4 address, an IPv6 /64) and in total, a hold given back whole and once; buffer() keeping a
// body within the budget, and a body beyond it (or beyond the cap) put back into its stream whole
// and in order with nothing kept; a client that goes away mid-body gives its bytes back.
import { PassThrough } from 'node:stream';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { buffer, RetryBudget } from '../../src/channel/sender-body.js';

test('the budget counts per source (an IPv6 /64 is one) and in total, and a hold gives back what it took, once', () => {
  const b = new RetryBudget(100, 250);
  const one = b.hold('2001:db8:1:2::a');
  const same = b.hold('2001:db8:1:2:ffff::b'); // the same /64
  assert.ok(one.take(60));
  assert.not.ok(same.take(41), 'the /64 has 40 left');
  assert.ok(same.take(40));
  assert.is(b.heldBy('2001:db8:1:2::1'), 100);
  const v4 = b.hold('192.0.2.7');
  assert.ok(v4.take(100));
  const other = b.hold('192.0.2.8');
  assert.not.ok(other.take(51), 'the host has 50 left');
  assert.ok(other.take(50));
  assert.is(b.held, 250);
  one.release();
  one.release();
  assert.is(b.heldBy('2001:db8:1:2::1'), 40);
  assert.is(b.held, 190);
  for (const h of [same, v4, other]) h.release();
  assert.is(b.held, 0);
  assert.is(b.heldBy('192.0.2.7'), 0);
});

const read = (s: PassThrough) =>
  new Promise<Buffer>((resolve) => {
    const parts: Buffer[] = [];
    s.on('data', (c: Buffer) => parts.push(c)).on('end', () => resolve(Buffer.concat(parts)));
    s.resume(); // as pipe() does: buffer() paused it
  });

test('a body within the budget is kept whole; beyond it, or beyond the cap, it is put back whole and nothing is held', async () => {
  const b = new RetryBudget(1000, 10_000);
  const small = new PassThrough();
  const h1 = b.hold('192.0.2.1');
  const kept = buffer(small, 5000, h1);
  small.write(Buffer.alloc(300, 1));
  small.end(Buffer.alloc(300, 2));
  const k = await kept;
  assert.ok(k.whole);
  assert.is(Buffer.concat(k.chunks).length, 600);
  assert.is(b.heldBy('192.0.2.1'), 600);

  // the same source: 400 left, so a 900-byte body is not kept
  const big = new PassThrough();
  const body = Buffer.concat([Buffer.alloc(300, 3), Buffer.alloc(300, 4), Buffer.alloc(300, 5)]);
  const over = buffer(big, 5000, b.hold('192.0.2.1'));
  big.write(body.subarray(0, 300));
  big.write(body.subarray(300, 600));
  const o = await over;
  assert.not.ok(o.whole);
  assert.equal(o.chunks, [], 'no copy');
  assert.is(b.heldBy('192.0.2.1'), 600, 'what it took is given back');
  big.end(body.subarray(600));
  assert.ok((await read(big)).equals(body), 'the stream gives the whole body, in order');

  // beyond the cap: the same, whatever the budget
  const long = new PassThrough();
  const capped = buffer(long, 100, b.hold('192.0.2.9'));
  long.end(Buffer.alloc(150, 6));
  const c = await capped;
  assert.not.ok(c.whole);
  assert.is((await read(long)).length, 150);
  assert.is(b.heldBy('192.0.2.9'), 0);
  h1.release();
  assert.is(b.held, 0);
});

test('a client that goes away mid-body gives its bytes back', async () => {
  const b = new RetryBudget(1000, 10_000);
  const s = new PassThrough();
  const got = buffer(s, 5000, b.hold('192.0.2.1'));
  s.write(Buffer.alloc(500));
  await new Promise((r) => setImmediate(r));
  assert.is(b.held, 500);
  s.destroy();
  assert.ok((await got).gone);
  assert.is(b.held, 0);
});

test.run();
