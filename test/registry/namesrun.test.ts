// Registry name writes are made only while this run holds its host name (issue 35 review, finding
// 2): each write of names.ts checks, in its own statement, that the hosts table names this run as
// the holder, so a run that lost its name (another run or instance took it over) changes nothing
// even while its in-memory `held` still says yes. Real PostgreSQL, RegistryNames driven directly.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { RegistryNames, RegistryPool } from '../../src/registry/index.js';
import { initRegistry } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';

let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  await pg.sql(
    `INSERT INTO hosts (name, advertise, public_ip, version, started_at, heartbeat_at, lease_until, instance, run)
     VALUES ('host-a', '127.0.0.1:1', '127.0.0.1', 'test', now(), now(), now() + interval '1 hour', 'ins_a', 'run_1')`,
  );
});
test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

const code = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (e: unknown) => (isAppError(e) ? e.code : String(e)),
  );
const rows = () =>
  pg.sql(`SELECT (SELECT count(*) FROM slugs) || ' ' || (SELECT count(*) FROM placements) || ' ' || (SELECT coalesce(sum(epoch), 0) FROM placements)`);

test('a run that holds its name writes; once another run holds it, none of its writes changes anything', async () => {
  const names = new RegistryNames(pool, 'host-a', { instance: 'ins_a', run: 'run_1', held: true });
  const one = { serverId: 'srv_1', accountId: 'acc_1', slug: 'one', publicIp: '192.0.2.1' };
  assert.ok(await names.claim('one', 'srv_1'));
  assert.is((await names.place(one)).epoch, 1);
  assert.equal(await names.startAt('srv_1'), { started: 2 });
  assert.ok(await names.claim('two', 'srv_2'));
  assert.is(await rows(), '2 1 2');

  // the same instance started again elsewhere (a copy of the data dir): the name is that run's now
  await pg.sql(`UPDATE hosts SET run = 'run_2' WHERE name = 'host-a'`);
  assert.is(await code(names.claim('three', 'srv_3')), 'registry_unavailable', 'a claim is refused, not answered "taken"');
  assert.is(await code(names.place({ ...one, serverId: 'srv_2', slug: 'two' })), 'registry_unavailable');
  assert.is(await code(names.place(one, 2)), 'registry_unavailable', 'nor placed again from the epoch it read');
  const start = await names.startAt('srv_1');
  assert.ok(start && start !== 'deleted' && !('started' in start), `no start at a new epoch: ${JSON.stringify(start)}`);
  await names.release('two', 'srv_2');
  assert.is(await code(names.remove('srv_1')), 'registry_unavailable');
  assert.is(await rows(), '2 1 2', 'slugs, placements and epochs as they were');

  // the run that holds the name writes
  const now = new RegistryNames(pool, 'host-a', { instance: 'ins_a', run: 'run_2', held: true });
  await now.release('two', 'srv_2');
  assert.is(await rows(), '1 1 2');
});

test.run();
