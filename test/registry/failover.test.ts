// The registry on a primary with a synchronous standby (real PostgreSQL streaming replication):
// the primary killed with SIGKILL and the standby promoted, a host whose registry URL names both
// finds the new primary after one 503 registry_unavailable, and a payment lock and a slug claim
// committed before the failover still refuse their replay there.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { migrate, RegistryNames, RegistryPayments, RegistryPool, redactUrl } from '../../src/registry/index.js';
import { startPostgres, startStandby, type TestPostgres, type TestStandby } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

let primary: TestPostgres;
let standby: TestStandby;
let pool: RegistryPool;

test.before(async () => {
  primary = await startPostgres();
  standby = await startStandby(primary);
});
test.after(async () => {
  await pool?.end();
  await standby?.stop();
  await primary?.stop();
});

test('a multi-host URL keeps its password out of logs', () => {
  const url = `postgres://rootbox:${primary.password}@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres?sslpassword=x`;
  assert.is(redactUrl(url), `postgres://rootbox:***@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres?sslpassword=***`);
});

test('after the primary dies and its synchronous standby is promoted, locks and claims committed before still refuse their replay', async () => {
  pool = new RegistryPool({
    url: `postgres://rootbox:${primary.password}@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres`,
    connectTimeoutMs: 500,
    statementTimeoutMs: 2000,
  });
  await migrate(pool);
  const payments = new RegistryPayments(pool, 'host-a');
  const names = new RegistryNames(pool, 'host-a');
  assert.ok(await payments.lock('base:0xpayer:0x01'));
  assert.ok(await names.claim('kept', 'srv_kept'));
  assert.is(await standby.sql("SELECT count(*) FROM payment_locks WHERE key = 'base:0xpayer:0x01'"), '1', 'on the standby at commit');

  await primary.kill();
  await standby.promote();

  // the first call after the failover is a clear 503; the pool then uses the promoted standby
  const first = await payments.lock('base:0xpayer:0x01').then(
    (v) => v,
    (e: unknown) => (isAppError(e) ? e.code : e),
  );
  if (first !== 'registry_unavailable') assert.is(first, false);
  const replay = await until(
    'the pool reaches the promoted standby',
    () =>
      payments.lock('base:0xpayer:0x01').then(
        (v) => ({ v }),
        () => undefined,
      ),
    10_000,
    100,
  );
  assert.is(replay.v, false, 'the payment locked before the failover is still used');
  assert.is(pool.using, 1);
  assert.is(await names.claim('kept', 'srv_other'), false, 'the slug claimed before the failover is still taken');
  assert.ok(await payments.lock('base:0xpayer:0x02'), 'new payments lock on the new primary');
});

test.run();
