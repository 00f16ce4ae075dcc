// A drain's failed move that another try does not change (issue 38 review L6): the target refused
// the server for good (409 move_refused: it has it already, takes no moved servers, or reads no
// such request) — the drain records the failure with why in the host's row (real PostgreSQL,
// `cluster init`'s schema, registry/drains.ts) and does not try it again, however long it runs;
// a retryable failure (503 move_failed) is tried again after drainRetry. The drain loop runs as
// the daemon runs it (moves/drain.ts), with its clock injected and the move given to it.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { AppError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/index.js';
import { startDrain, type MovesDeps } from '../../src/moves/index.js';
import { HostDrains, RegistryPool } from '../../src/registry/index.js';
import type { ServerRecord } from '../../src/store/index.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { startClusterRegistry } from '../registry/fixtures/twohosts.js';

const GiB = 1024 ** 3;
let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startClusterRegistry();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 5000 });
  await pg.sql(`INSERT INTO hosts (name, advertise, public_ip, capacity, version, started_at, heartbeat_at, lease_until) VALUES
    ('host-a', '127.0.0.1:1', '127.0.0.1', '{}', 't', now(), now(), now() + interval '1 hour')`);
});

test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

const server = (id: string): ServerRecord => ({
  id,
  accountId: 'acc_1',
  slug: id.slice(4),
  sshPublicKey: 'k',
  keyFingerprint: 'f',
  memoryBytes: GiB,
  diskBytes: GiB,
  neverSleep: false,
  suspended: false,
  flag: null,
  createdAt: 1,
});

test('a move the target refused for good is recorded with why and not tried again; a retryable one is', async () => {
  const drains = new HostDrains(pool);
  assert.ok(await drains.mark('host-a'));
  const servers = [server('srv_00f1'), server('srv_00f2')];
  const tries: Record<string, number> = { srv_00f1: 0, srv_00f2: 0 };
  let clock = 1_000_000;
  const room = { servers: 0, serversMax: 0, memoryFreeBytes: 64 * GiB, diskFreeBytes: 500 * GiB, memoryRoomBytes: 32 * GiB, diskRoomBytes: 100 * GiB };
  const d = {
    log: silentLogger,
    channel: {},
    store: { servers: { all: () => servers, getAny: (id: string) => servers.find((s) => s.id === id) } },
    registry: {
      host: 'host-a',
      ready: Promise.resolve(),
      drains,
      hosts: { list: async () => [{ name: 'host-b', up: true, drain: null, capacity: room }] },
      placements: { host: () => ({ up: true }) },
    },
    moves: {
      move: async (rec: ServerRecord) => {
        tries[rec.id]++;
        throw rec.id === 'srv_00f1'
          ? AppError.of('move_refused', 'host host-b did not take it: this host takes no moved servers (not_configured)')
          : AppError.of('move_failed', 'host host-b did not answer', { retryAfter: 30 });
      },
    },
  } as unknown as Pick<MovesDeps, 'registry' | 'store' | 'log'> & { channel: unknown; moves: Parameters<typeof startDrain>[0]['moves'] };
  const drain = startDrain(d, { concurrency: 2, retryMs: 1000, tickMs: 20, now: () => clock });
  try {
    await until('both tried once', () => tries.srv_00f1 === 1 && tries.srv_00f2 === 1, 5000, 10);
    for (let i = 0; i < 5; i++) {
      clock += 60_000; // far past any retry wait
      const before = tries.srv_00f2;
      await until('the retryable one tried again', () => tries.srv_00f2 > before, 5000, 10);
    }
    assert.is(tries.srv_00f1, 1, 'the refused one is not tried again');
    const mark = await drains.of('host-a');
    assert.match(mark?.failed.srv_00f1?.why ?? '', /not_configured.*not tried again/);
    assert.is(mark?.failed.srv_00f1?.attempts, 1);
    assert.ok((mark?.failed.srv_00f2?.attempts ?? 0) >= 6);
  } finally {
    await drain.stop();
  }
});

test.run();
