// A registry connection held by a transaction (RegistryPool.tx) that the server ends under it — an
// operator's pg_terminate_backend, a PostgreSQL stop or failover (57P01) — fails that transaction
// with registry_unavailable; it never reaches the process as an unhandled 'error' event (which
// ended the daemon: moves/move's "registry halted mid-move" crashed on it).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryPool } from '../../src/registry/index.js';
import { isAppError } from '../../src/errors.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

let pg: TestPostgres;
let pool: RegistryPool;
test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 5000 });
});
test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

test('a transaction whose connection the server terminates between two statements fails with registry_unavailable, and the pool serves on', async () => {
  const other = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 5000 });
  try {
    const failed = await pool
      .tx(async (c) => {
        const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
        await other.query('SELECT pg_terminate_backend($1)', [pid]);
        // the server's FATAL arrives while this connection runs no statement
        await until(
          'the backend ended',
          async () => (await other.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0].n === 0,
          5000,
          10,
        );
        await new Promise((r) => setImmediate(r));
        await c.query('SELECT 1');
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(isAppError(failed) && failed.code === 'registry_unavailable', String(failed));
    assert.is((await pool.query<{ one: number }>('SELECT 1 AS one')).rows[0].one, 1, 'the pool serves on');
  } finally {
    await other.end();
  }
});

test.run();
