// A server's settings row (registry/settings.ts, review 2 findings 4–7), real PostgreSQL: writes go
// off the request path through one writer per host (settingswriter.ts) that keeps the newest
// wanted row of each server until the registry took it — a failed write is written again at the
// next heartbeat that reached the registry, never an older state after a newer one, a create is
// not failed by it, a hanging registry holds up no answer — and a write lands only where the
// registry places the server on this instance and run, its placement read FOR SHARE.
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { silentLogger } from '../../src/log/index.js';
import { keyedNames, Registry, RegistryNames, RegistryPool, RegistrySettings, RegistryShared, SettingsWriter } from '../../src/registry/index.js';
import type { ServerSettingsRow } from '../../src/registry/index.js';
import { initRegistry, testKeys } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

let pgs: TestPostgres;
let pool: RegistryPool;
const holder = { instance: 'ins_a', run: 'run_1', held: true };

test.before(async () => {
  pgs = await startPostgres();
  pool = new RegistryPool({ url: pgs.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  await initRegistry(pool);
  await pgs.sql(
    `INSERT INTO hosts (name, advertise, public_ip, version, started_at, heartbeat_at, lease_until, instance, run)
     VALUES ('host-a', '127.0.0.1:1', '127.0.0.1', 'test', now(), now(), now() + interval '1 hour', 'ins_a', 'run_1'),
            ('host-b', '127.0.0.1:2', '127.0.0.1', 'test', now(), now(), now() + interval '1 hour', 'ins_b', 'run_b')`,
  );
});
test.after(async () => {
  await pool?.end();
  await pgs?.stop();
});

const names = new Map<string, RegistryNames>();
const namesOf = () => names.get('a') ?? names.set('a', new RegistryNames(pool, 'host-a', holder)).get('a')!;
const place = async (id: string) => {
  await namesOf().claim(id, id);
  await namesOf().place({ serverId: id, accountId: 'acc_1', slug: id, publicIp: '192.0.2.1' });
};
const row = (id: string) =>
  pgs.sql(`SELECT coalesce((SELECT never_sleep || ' ' || exposed::text || ' ' || host FROM server_settings WHERE server_id = '${id}'), 'none')`);

test('a create whose settings write fails is not failed; the row is written at the next heartbeat that reached the registry', async () => {
  const writer = new SettingsWriter(new RegistrySettings(pool, 'host-a', holder), silentLogger);
  const kn = keyedNames(namesOf(), new RegistryShared(pool, 'host-a', testKeys()), writer);
  await pgs.sql('ALTER TABLE server_settings RENAME TO server_settings_away');
  try {
    await kn.claim('one', 'srv_one');
    const placed = await kn.place({ serverId: 'srv_one', accountId: 'acc_1', slug: 'one', publicIp: '192.0.2.1', neverSleep: true });
    assert.is(placed.epoch, 1, 'the create is placed');
    await writer.flush();
    assert.is(writer.pending, 1, 'the settings are kept for a later write');
  } finally {
    await pgs.sql('ALTER TABLE server_settings_away RENAME TO server_settings');
  }
  assert.is(await row('srv_one'), 'none');
  writer.retry(); // what Registry does at each heartbeat that reached the registry
  await writer.flush();
  assert.is(await row('srv_one'), 'true {} host-a');
  assert.is(writer.pending, 0);
});

test('expose then unexpose in quick succession: one write at a time, the newest state is the one the registry keeps', async () => {
  await place('srv_order');
  const real = new RegistrySettings(pool, 'host-a', holder);
  let inFlight = 0;
  let most = 0;
  const counted = {
    put: async (rows: readonly ServerSettingsRow[]) => {
      most = Math.max(most, ++inFlight);
      try {
        await real.put(rows);
      } finally {
        inFlight--;
      }
    },
  };
  const writer = new SettingsWriter(counted, silentLogger);
  // another transaction holds the row: the first write waits in PostgreSQL while the next ones come
  await real.put([{ serverId: 'srv_order', neverSleep: false, exposed: [] }]);
  const c = new pg.Client({ connectionString: pgs.url });
  await c.connect();
  try {
    await c.query('BEGIN');
    await c.query(`SELECT 1 FROM server_settings WHERE server_id = 'srv_order' FOR UPDATE`);
    writer.want([{ serverId: 'srv_order', neverSleep: false, exposed: [5432] }]);
    writer.want([{ serverId: 'srv_order', neverSleep: false, exposed: [5432, 8080] }]);
    writer.want([{ serverId: 'srv_order', neverSleep: false, exposed: [8080] }]);
    await c.query('COMMIT');
  } finally {
    await c.end();
  }
  await writer.flush();
  assert.is(most, 1, 'never two writes of the settings at once');
  assert.is(await row('srv_order'), 'false {8080} host-a', 'the newest state, not an older one committed last');
});

test('a registry that does not answer holds up no settings change, and a burst uses one connection', async () => {
  const sockets: net.Socket[] = [];
  const hole = net.createServer((s) => sockets.push(s)); // accepts, never answers
  await new Promise<void>((r) => hole.listen(0, '127.0.0.1', r));
  const port = (hole.address() as net.AddressInfo).port;
  const dead = new RegistryPool({ url: `postgres://x:y@127.0.0.1:${port}/rootbox`, connectTimeoutMs: 3000, statementTimeoutMs: 3000 });
  const writer = new SettingsWriter(new RegistrySettings(dead, 'host-a', holder), silentLogger);
  const kn = keyedNames(new RegistryNames(dead, 'host-a', holder), new RegistryShared(dead, 'host-a', testKeys()), writer);
  try {
    const started = performance.now();
    for (let i = 0; i < 10; i++) await kn.settings({ serverId: 'srv_hang', neverSleep: false, exposed: [1000 + i] });
    assert.ok(performance.now() - started < 1000, `answered at once, not after the registry's timeout (${Math.round(performance.now() - started)} ms)`);
    await writer.flush();
    assert.is(sockets.length, 1, 'one write under way, not one per change');
    assert.is(writer.pending, 1, 'the newest state kept for the registry’s return');
  } finally {
    for (const s of sockets) s.destroy();
    hole.close();
    await dead.end().catch(() => {});
  }
});

test('a write lands only where the registry places the server on this instance, while this run holds the name', async () => {
  await place('srv_held');
  const mine = (id: string, exposed: number[], h = holder) => new RegistrySettings(pool, 'host-a', h).put([{ serverId: id, neverSleep: false, exposed }]);
  await mine('srv_held', [22]);
  assert.is(await row('srv_held'), 'false {22} host-a');
  // another instance of host-a (a copy of its data dir) writes nothing to it
  await mine('srv_held', [23], { instance: 'ins_other', run: 'run_1', held: true });
  assert.is(await row('srv_held'), 'false {22} host-a', 'not the placing instance');
  // a run that no longer holds the name writes nothing
  await pgs.sql(`UPDATE hosts SET run = 'run_2' WHERE name = 'host-a'`);
  try {
    await mine('srv_held', [24]);
    assert.is(await row('srv_held'), 'false {22} host-a', 'not the run that holds the name');
  } finally {
    await pgs.sql(`UPDATE hosts SET run = 'run_1' WHERE name = 'host-a'`);
  }
});

test('a move that commits while the old host writes: the old host’s write does not land over the new owner', async () => {
  await place('srv_move');
  const settings = new RegistrySettings(pool, 'host-a', holder);
  await settings.put([{ serverId: 'srv_move', neverSleep: false, exposed: [22] }]);
  const c = new pg.Client({ connectionString: pgs.url });
  await c.connect();
  try {
    // the move to host-b with its new owner's row, not committed yet
    await c.query('BEGIN');
    await c.query(`UPDATE placements SET host = 'host-b', instance = 'ins_b', epoch = epoch + 1 WHERE server_id = 'srv_move'`);
    await c.query(`UPDATE server_settings SET exposed = '{80}', host = 'host-b' WHERE server_id = 'srv_move'`);
    const put = settings.put([{ serverId: 'srv_move', neverSleep: false, exposed: [5432] }]);
    // the old host's write waits for the move's transaction
    for (let i = 0; ; i++) {
      if ((await pgs.sql(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`)) === '1') break;
      if (i === 500) assert.unreachable('the write did not wait for the move');
      await new Promise((r) => setTimeout(r, 10));
    }
    await c.query('COMMIT');
    await put;
  } finally {
    await c.end();
  }
  assert.is(await row('srv_move'), 'false {80} host-b', 'the new owner’s row stays');
});

test('a daemon’s registry writes what a failed settings write left at its next heartbeat', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-settingsrow-'));
  const r = new Registry(
    {
      url: pgs.url,
      host: 'host-s',
      advertise: '127.0.0.1:7100',
      publicIp: '127.0.0.1',
      version: 'test',
      leaseMs: 900,
      connectTimeoutMs: 500,
      statementTimeoutMs: 2000,
      capacity: () => ({ memoryFreeBytes: 1 << 30 }),
      dataDir: dir,
      replaceHost: false,
      keys: testKeys(),
    },
    silentLogger,
  );
  try {
    await r.start();
    assert.ok(await r.names.claim('beat', 'srv_beat'));
    await r.names.place({ serverId: 'srv_beat', accountId: 'acc_1', slug: 'beat', publicIp: '192.0.2.1' });
    await pgs.sql('ALTER TABLE server_settings RENAME TO server_settings_away');
    try {
      r.settings.want([{ serverId: 'srv_beat', neverSleep: false, exposed: [5432] }]);
      await r.settings.flush();
      assert.is(r.settings.pending, 1, 'the failed write is kept');
    } finally {
      await pgs.sql('ALTER TABLE server_settings_away RENAME TO server_settings');
    }
    await until('written at a heartbeat', async () => ((await row('srv_beat')) === 'false {5432} host-s' ? true : undefined), 5000, 50);
    assert.is(r.settings.pending, 0);
  } finally {
    await r.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
