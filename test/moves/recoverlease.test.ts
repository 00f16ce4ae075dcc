// The registry's side of a dead host's recovery (registry/recoveries.ts, schema 24) on a real
// PostgreSQL prepared by `cluster init`: one recovery lease at a time (another host is refused
// while it runs, takes it once it lapsed or was given back), when each host last saw its servers
// running (never moved back by an older report), and the placements of a dead host with their
// SSH keys and last activity.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestPostgres } from '../helpers/postgres.js';
import { RegistryPool, RegistryRecoveries } from '../../src/registry/index.js';
import { startClusterRegistry } from '../registry/fixtures/twohosts.js';
import { until } from '../helpers/wait.js';

let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startClusterRegistry();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 5000 });
});

test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

test('one host holds the recovery lease at a time; another takes it once it lapsed or was given back', async () => {
  const a = new RegistryRecoveries(pool, 'host-a');
  const b = new RegistryRecoveries(pool, 'host-b');
  assert.ok(await a.lease('host-c', 60_000), 'a takes it');
  assert.not.ok(await b.lease('host-c', 60_000), 'b is refused while it runs');
  assert.not.ok(await b.lease('host-d', 60_000), 'for any dead host');
  assert.ok(await a.lease('host-c', 60_000), 'a renews it');
  await b.release(); // not b's: nothing happens
  assert.not.ok(await b.lease('host-c', 60_000));
  await a.release();
  assert.ok(await b.lease('host-c', 300), 'given back: b takes it');
  assert.not.ok(await a.lease('host-c', 60_000));
  // b's 300 ms lease lapses on the registry's clock: a takes it then (asked until it does, within a deadline)
  await until('a takes the lapsed lease', () => a.lease('host-c', 60_000), 5000, 50);
  await a.release();
});

test("a dead host's placements with their keys and when they last ran; activity only moves forward", async () => {
  await pg.sql(`INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip) VALUES
    ('srv_01', 'host-c', 3, 'acc_1', 'one', '127.0.0.1'), ('srv_02', 'host-c', 1, 'acc_1', 'two', '127.0.0.1'),
    ('srv_03', 'host-a', 1, 'acc_1', 'three', '127.0.0.1')`);
  await pg.sql(`INSERT INTO server_keys (server_id, fingerprint, public_key, host) VALUES ('srv_01', 'fp1', 'ssh-ed25519 AAAA one', 'host-c')`);
  const c = new RegistryRecoveries(pool, 'host-c');
  await c.active(['srv_01'], 5000);
  await c.active(['srv_01'], 4000); // an older report changes nothing
  const a = new RegistryRecoveries(pool, 'host-a');
  await a.active(['srv_03'], 100);
  assert.equal(await a.placedOn('host-c'), [
    { serverId: 'srv_01', accountId: 'acc_1', slug: 'one', epoch: 3, publicKey: 'ssh-ed25519 AAAA one', fingerprint: 'fp1', activeAt: 5000 },
    { serverId: 'srv_02', accountId: 'acc_1', slug: 'two', epoch: 1 },
  ]);
  // once another host runs it, host-c's report is no longer its activity there
  await a.active(['srv_01'], 10);
  assert.is((await a.placedOn('host-c'))[0].activeAt, undefined);
  await a.record({ serverId: 'srv_02', from: 'host-c', outcome: 'unrecoverable', detail: 'no checkpoint' });
  await a.record({ serverId: 'srv_01', from: 'host-c', to: 'host-a', outcome: 'recovered', detail: 'from ckp', lostMs: 1500 });
  const rows = await a.list();
  assert.equal(
    rows.map((r) => [r.server_id, r.outcome, r.to_host, r.lost_ms]),
    [
      ['srv_01', 'recovered', 'host-a', 1500],
      ['srv_02', 'unrecoverable', null, null],
    ],
  );
});

test.run();
