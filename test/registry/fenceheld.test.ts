// The wake fence (src/registry/fence.ts) and this run's hold on its host name: a run that reached
// the registry but does not hold its name (another instance took it, or refused this one's claim)
// starts no server, without asking for the placement; a registry that cannot be reached still lets
// a host start what it has (registry trouble degrades, never corrupts).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { createLogger } from '../../src/log/index.js';
import { WakeFence, type FenceNames } from '../../src/registry/index.js';

const log = createLogger({ level: 'error' });
/** A placement source that answers "started here" and counts the reads. */
function source() {
  const s = { reads: 0, startAt: async () => (s.reads++, { started: 2 }) };
  return s;
}

test('a run that does not hold its host name starts nothing and reads no placement', async () => {
  const names = source();
  const fence = new WakeFence('host-a', names as unknown as FenceNames, log, () => 'not-held');
  const err = await fence.check('srv_1').then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isAppError(err) && err.code === 'server_moved', String(err));
  assert.is(names.reads, 0);
  assert.is(fence.refused, 1);
});

test('a run that holds its name starts what the registry places here; an unreachable registry lets it start what it has', async () => {
  const names = source();
  await new WakeFence('host-a', names as unknown as FenceNames, log, () => 'held').check('srv_1');
  assert.is(names.reads, 1);
  await new WakeFence('host-a', names as unknown as FenceNames, log, () => 'down').check('srv_1');
  assert.is(names.reads, 1, 'no read while the registry is down');
});

test.run();
