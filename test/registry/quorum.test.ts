// The README's registry set-up, checked: a primary with two synchronous standbys under
// `synchronous_standby_names = 'ANY 1 (s1, s2)'` keeps committing while one standby is down, and
// a daemon in cluster mode writes through it (a create claims its name and places the server)
// with that standby down; a commit then is on the standby still up. Then the guide's promotion
// (contrib/registry-cluster.sh): the primary dies, s2 (whose copy of the primary's settings names
// s1 and s2 as synchronous standbys) is promoted and takes writes at once, s1 follows it, and
// s2 made to wait for s1 again.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // what is tested here needs no container
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, startStandby, type TestPostgres, type TestStandby } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { initRegistry } from '../helpers/cluster.js';

let pg: TestPostgres;
let s1: TestStandby | undefined;
let s2: TestStandby | undefined;
let d: TestDaemon | undefined;

test.after(async () => {
  await d?.stop();
  await s1?.stop();
  await s2?.stop();
  await pg?.stop();
});

test('ANY 1 of two synchronous standbys: with one down, commits and the daemon’s registry writes go on and reach the other', async () => {
  pg = await startPostgres();
  s1 = await startStandby(pg, 's1', 'ANY 1 (s1, s2)');
  s2 = await startStandby(pg, 's2', 'ANY 1 (s1, s2)');
  assert.is(
    await pg.sql(`SELECT string_agg(application_name || ' ' || sync_state, ', ' ORDER BY application_name) FROM pg_stat_replication`),
    's1 quorum, s2 quorum',
  );
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  try {
    await initRegistry(pool);
  } finally {
    await pool.end();
  }
  await s1.halt();
  await until(
    'the primary sees s1 gone',
    async () => (await pg.sql(`SELECT count(*) FROM pg_stat_replication WHERE application_name = 's1'`)) === '0',
    20_000,
    50,
  );

  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    cluster: { registry: pg.url, host: 'host-a', lease: '3s', connectTimeout: '500ms', statementTimeout: '5s' },
  });
  const r = await send(d.http, 'api.localhost', 'POST', '/create', { body: { subdomains: ['quorum'] } });
  assert.is(r.status, 200, r.text);
  const id = (r.json as { id: string }).id;
  // acknowledged means flushed on s2; it shows there once s2 has replayed it (hot standby, read-only)
  await until(
    'the placement is on s2',
    async () => (await s2!.sql(`SELECT host || ' ' || slug FROM placements WHERE server_id = '${id}'`)) === 'host-a quorum',
    20_000,
    50,
  );
});

test('the guide’s promotion: the promoted standby takes writes at once, the other follows it and is its synchronous standby', async () => {
  assert.ok(s1 && s2 && d);
  await d.stop();
  d = undefined;
  await pg.kill();
  await s2.promote();
  // a commit on s2 before its synchronous_standby_names was reset waited for standbys that do not stream from it
  const pool = new RegistryPool({ url: s2.url, connectTimeoutMs: 1000, statementTimeoutMs: 3000 });
  try {
    await pool.query('CREATE TABLE probe (n int)');
    await pool.query('INSERT INTO probe VALUES (1)');
  } finally {
    await pool.end();
  }
  await s1.start();
  await s1.follow(s2, 's1');
  await s2.sync('s1', 's1');
  assert.is(await s2.sql(`SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'`), 'sync');
  await s2.sql('INSERT INTO probe VALUES (2)');
  await until('the commit is on s1', async () => (await s1!.sql('SELECT count(*) FROM probe')) === '2', 20_000, 50);
});

test.run();
