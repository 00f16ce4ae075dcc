// The owner's admission of channel peers (src/channel/admit.ts): the key a host registered now
// decides (a key of its earlier run is refused once it registered the next); when the registry
// cannot answer (fails, or hangs past the wait) the key last read decides, so hosts cut off from
// the registry still take each other; a name the registry never knew is refused.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PeerAdmission } from '../../src/channel/owner-admit.js';
import { ManualClock } from '../helpers/clock.js';

function registry() {
  const keys = new Map<string, string>();
  let mode: 'up' | 'down' | 'hang' = 'up';
  let reads = 0;
  return {
    keys,
    set mode(m: 'up' | 'down' | 'hang') {
      mode = m;
    },
    get reads() {
      return reads;
    },
    channelKey(host: string): Promise<string | undefined> {
      reads++;
      if (mode === 'down') return Promise.reject(new Error('registry_unavailable'));
      if (mode === 'hang') return new Promise(() => {});
      return Promise.resolve(keys.get(host));
    },
  };
}

test('the registered key is taken, another key or an unknown name is refused, a new run’s key replaces the old', async () => {
  const r = registry();
  const admit = new PeerAdmission(r);
  r.keys.set('host-b', 'K1');
  assert.ok(await admit.admit('host-b', 'K1'));
  assert.not.ok(await admit.admit('host-b', 'K2'), 'a key host-b did not register');
  assert.not.ok(await admit.admit('host-x', 'K1'), 'a name the registry does not know');
  assert.not.ok(await admit.admit('', 'K1'));
  assert.not.ok(await admit.admit('host-b', undefined));
  r.keys.set('host-b', 'K2'); // host-b started again
  assert.ok(await admit.admit('host-b', 'K2'));
  assert.not.ok(await admit.admit('host-b', 'K1'), "the earlier run's key, once the next one is registered");
});

test('with the registry down or hanging, the key last read decides', async () => {
  const r = registry();
  const clock = new ManualClock();
  const admit = new PeerAdmission(r, clock);
  r.keys.set('host-b', 'K1');
  assert.ok(await admit.admit('host-b', 'K1'));
  r.mode = 'down';
  assert.ok(await admit.admit('host-b', 'K1'));
  assert.not.ok(await admit.admit('host-b', 'K2'));
  assert.not.ok(await admit.admit('host-c', 'K1'), 'never read: refused');
  r.mode = 'hang';
  const taken = admit.admit('host-b', 'K1');
  clock.advance(300); // the wait for the read, by the clock (test/channel/injectedclock.test.ts: nothing sooner)
  assert.ok(await taken, 'a hanging registry does not hold the connection');
});

test('past the reads a second, the key last read decides without a read', async () => {
  const r = registry();
  const clock = new ManualClock();
  const admit = new PeerAdmission(r, clock);
  r.keys.set('host-b', 'K1');
  for (let i = 0; i < 150; i++) await admit.admit(`stranger-${i}`, 'S');
  assert.is(r.reads, 100);
  assert.ok((await admit.admit('host-b', 'K1')) === false, 'host-b was never read in this second');
  clock.advance(1000);
  assert.ok(await admit.admit('host-b', 'K1'));
  assert.is(r.reads, 101);
});

test.run();
