// What a host can still take and which host a create goes to (hosting/capacity.ts): room counted
// from the servers' ceilings against the configured budgets, the reasons a tier does not fit,
// and the choice of the up host (never this one) with the most memory room that fits.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loadConfig } from '../../src/config/index.js';
import { chooseHost, measureCapacity, shortOf, type HostRoom } from '../../src/hosting/capacity.js';
import { TIER_LIMITS } from '../../src/hosting/index.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const dir = mkdtempSync(join(tmpdir(), 'rbx-capacity-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

const cfg = (capacity: Record<string, unknown>) => loadConfig({ env: {}, file: undefined, overrides: { dataDir: dir, hosting: { capacity } } });

test('room is the budget less the ceilings of every server, pending ones included; the count against hosting.capacity.servers', () => {
  const servers = [TIER_LIMITS.anonymous, TIER_LIMITS.verified, TIER_LIMITS.anonymous];
  const c = measureCapacity(cfg({ servers: 5, memory: 8 * GiB, disk: 4 * GiB }), servers);
  assert.is(c.servers, 3);
  assert.is(c.serversMax, 5);
  assert.is(c.memoryRoomBytes, 8 * GiB - 2 * GiB - 512 * MiB);
  assert.is(c.diskRoomBytes, Math.min(4 * GiB - 1 * GiB - 512 * MiB, c.diskFreeBytes - 2 * GiB));
  assert.is(measureCapacity(cfg({ memory: 1 * GiB }), servers).memoryRoomBytes, 0, 'never below zero');
  assert.is(measureCapacity(cfg({}), []).serversMax, 0, 'no count limit by default');
});

test('a tier does not fit a host at its server count, without memory or disk room for its ceilings, or reporting no capacity', () => {
  const room = { servers: 1, serversMax: 0, memoryFreeBytes: 8 * GiB, diskFreeBytes: 50 * GiB, memoryRoomBytes: 4 * GiB, diskRoomBytes: 5 * GiB };
  assert.is(shortOf(room, TIER_LIMITS.paid), undefined);
  assert.match(shortOf({ ...room, serversMax: 1 }, TIER_LIMITS.anonymous)!, /most servers \(1\)/);
  assert.match(shortOf({ ...room, memoryRoomBytes: 3 * GiB }, TIER_LIMITS.paid)!, /memory/);
  assert.is(shortOf({ ...room, memoryRoomBytes: 3 * GiB }, TIER_LIMITS.verified), undefined, 'a smaller tier still fits');
  assert.match(shortOf({ ...room, diskRoomBytes: 4 * GiB }, TIER_LIMITS.paid)!, /disk/);
  assert.match(shortOf({ ...room, memoryFreeBytes: 100 * MiB }, TIER_LIMITS.anonymous)!, /out of memory right now/);
  assert.match(shortOf({ memoryFreeBytes: 8 * GiB, diskFreeBytes: 50 * GiB }, TIER_LIMITS.anonymous)!, /reports no capacity/);
});

test('the chosen host is the up one, never this one, with the most memory room that fits the tier', () => {
  const h = (name: string, memoryRoomBytes: number, o: Partial<HostRoom> & { diskRoomBytes?: number } = {}): HostRoom => ({
    name,
    up: o.up ?? true,
    capacity: { servers: 0, serversMax: 0, memoryFreeBytes: 8 * GiB, diskFreeBytes: 50 * GiB, memoryRoomBytes, diskRoomBytes: o.diskRoomBytes ?? 10 * GiB },
  });
  const hosts = [
    h('self', 64 * GiB),
    h('down', 32 * GiB, { up: false }),
    h('small', 1 * GiB),
    h('big', 8 * GiB),
    h('bigger-disk', 8 * GiB, { diskRoomBytes: 20 * GiB }),
  ];
  assert.is(chooseHost(hosts, 'self', TIER_LIMITS.anonymous), 'bigger-disk', 'most memory room, then most disk room');
  assert.is(chooseHost([h('small', 1 * GiB), h('other', 3 * GiB)], 'self', TIER_LIMITS.paid), undefined, 'none fits a paid ceiling');
  assert.is(chooseHost([h('self', 64 * GiB)], 'self', TIER_LIMITS.anonymous), undefined, 'never this host');
  assert.is(chooseHost([{ name: 'old', up: true, capacity: { memoryFreeBytes: GiB } }], 'self', TIER_LIMITS.anonymous), undefined);
});

test.run();
