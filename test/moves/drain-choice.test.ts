// Where a draining host sends each server (issue 38 item 2, moves/drain.ts drainTarget): the up
// host with the most room, never the draining host itself, another draining host or a down one,
// and the moves already under way to a host counted against its room (two concurrent moves do not
// both take a host's last place).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { drainTarget, type DrainHost } from '../../src/moves/index.js';

const GiB = 1024 ** 3;
const room = (memGiB: number, servers = 0, serversMax = 0) => ({
  servers,
  serversMax,
  memoryFreeBytes: 64 * GiB,
  diskFreeBytes: 500 * GiB,
  memoryRoomBytes: memGiB * GiB,
  diskRoomBytes: 100 * GiB,
});
const host = (name: string, memGiB: number, o: Partial<DrainHost> = {}): DrainHost => ({ name, up: true, drain: null, capacity: room(memGiB), ...o });
const need = { memoryBytes: 1 * GiB, diskBytes: 1 * GiB };
const none = new Map<string, (typeof need)[]>();

test('the host with the most memory room takes the server; the draining host itself never', () => {
  const hosts = [host('a', 100), host('b', 8), host('c', 16)];
  assert.is(drainTarget(hosts, 'a', need, none), 'c');
});

test('a host that is down or draining itself is skipped, whatever its room', () => {
  const draining = { since: new Date(), moved: 0, failed: {} };
  const hosts = [host('a', 1), host('b', 50, { drain: draining }), host('c', 40, { up: false }), host('d', 2)];
  assert.is(drainTarget(hosts, 'a', need, none), 'd');
  assert.is(drainTarget([host('a', 1), host('b', 50, { drain: draining })], 'a', need, none), undefined, 'no host open to servers');
});

test('moves under way count against a host: its last place goes once, then the next host', () => {
  const hosts = [host('a', 10), host('b', 30, { capacity: room(30, 3, 4) }), host('c', 2)];
  assert.is(drainTarget(hosts, 'a', need, none), 'b');
  assert.is(drainTarget(hosts, 'a', need, new Map([['b', [need]]])), 'c', 'b holds its most servers once the move to it lands');
  assert.is(
    drainTarget(
      hosts,
      'a',
      need,
      new Map([
        ['b', [need]],
        ['c', [need, need]],
      ]),
    ),
    undefined,
    'c has no memory room left either',
  );
});

test('a host whose lease reports no capacity, or too little for the server, takes none', () => {
  const hosts = [host('a', 10), { name: 'b', up: true, drain: null, capacity: {} }, host('c', 0.5)];
  assert.is(drainTarget(hosts, 'a', need, none), undefined);
});

test.run();
