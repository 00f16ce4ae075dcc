// How a host judges the others' leases through registry trouble (src/registry/leases.ts), on an
// injected clock: a lease that ran out while the registry could not be reached is excused while
// the trouble lasts and for one lease after; one that ran out before it is not; a read that is
// late counts as trouble under way; trouble again within the grace is the same trouble.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Trouble } from '../../src/registry/leases.js';

const GRACE = 3000;
let t = 0;
const now = () => t;

test('a lease that ran out during the trouble is excused until a lease after it ended; one that ran out before is not', () => {
  t = 1000;
  const reads = new Trouble({ graceMs: GRACE, now });
  reads.ok(); // last good read at 1000
  t = 1500;
  reads.failed();
  assert.not.ok(reads.excuses(900), 'ran out before the last good read: a dead host');
  assert.ok(reads.excuses(1200), 'ran out after it: nobody could renew');
  t = 20_000;
  reads.failed();
  assert.ok(reads.excuses(5000), 'still in the trouble');
  assert.ok(reads.excuses(19_000));
  t = 21_000;
  reads.ok(); // back: every host has a lease to renew
  assert.ok(reads.excuses(5000));
  t = 21_000 + GRACE - 1;
  assert.ok(reads.excuses(5000), 'within the grace');
  t = 21_000 + GRACE;
  assert.not.ok(reads.excuses(5000), 'not renewed a lease after the registry came back: down');
  assert.not.ok(reads.excuses(900));
});

test('trouble again within the grace is the same trouble; after it, a new one from the last good answer', () => {
  t = 0;
  const beats = new Trouble({ graceMs: GRACE, now });
  beats.ok();
  t = 100;
  beats.failed();
  t = 1000;
  beats.ok();
  t = 2000;
  beats.failed(); // within the grace of the first
  t = 10_000;
  beats.ok();
  assert.ok(beats.excuses(50), 'ran out during the first trouble: the grace runs from the end of the second');
  t = 10_000 + GRACE + 1;
  assert.not.ok(beats.excuses(50));
  beats.failed(); // a new trouble: from the last good answer (10 000)
  assert.not.ok(beats.excuses(50));
  assert.not.ok(beats.excuses(9000));
  assert.ok(beats.excuses(10_500));
});

test('no good answer for lateMs is trouble under way, though nothing failed yet; an answer ends it', () => {
  t = 0;
  const reads = new Trouble({ graceMs: GRACE, now, lateMs: 600 });
  reads.ok();
  t = 500;
  assert.not.ok(reads.excuses(400), 'a read due, not late yet: the lease counts');
  t = 700;
  assert.ok(reads.excuses(400), 'late: a lease that ran out since the last good read is not counted');
  assert.not.ok(reads.excuses(-1), 'one that ran out before it is');
  reads.ok();
  assert.not.ok(reads.excuses(400), 'the read came: nothing failed, the rows it read are judged as they are');
});

test('nothing seen yet: nothing is excused; a failure before any answer starts the trouble now', () => {
  t = 5000;
  const reads = new Trouble({ graceMs: GRACE, now, lateMs: 600 });
  assert.not.ok(reads.excuses(4000));
  reads.failed();
  assert.not.ok(reads.excuses(4000));
  assert.ok(reads.excuses(5000));
});

test.run();
