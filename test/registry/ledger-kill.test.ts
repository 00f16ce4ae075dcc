// kill -9 of a host while it meters into its outbox and writes it to a real PostgreSQL registry,
// again and again at seeded random moments: after the last restart the registry's ledger holds
// every metered hour of the server exactly once — contiguous periods, none lost, none doubled —
// and the balance is what those hours cost past the grant.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate, RegistryPool } from '../../src/registry/index.js';
import { openStore } from '../../src/store/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/wait.js';
import { HOUR, meterHost } from './fixtures/meterhost.js';
import { nodeArgs } from '../helpers/bundle.js';

const FIXTURE = new URL('./fixtures/meter-child.ts', import.meta.url).pathname;
const T0 = 1_700_000_000_000;
let pg: TestPostgres;
let pool: RegistryPool;
const dir = mkdtempSync(join(tmpdir(), 'rbx-ledger-kill-'));
const children = new Set<number>();

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await migrate(pool);
});
test.after(async () => {
  for (const pid of children) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  await pool?.end();
  await pg?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const written = async () => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ledger_entries WHERE account_id = 'acc_kill'`)).rows[0].n);

/** Starts the metering host; answers once it has opened its store. */
async function host() {
  const child = spawn(process.execPath, [...(await nodeArgs(FIXTURE)), dir, pg.url], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.add(child.pid!);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  let err = '';
  child.stderr.on('data', (c) => (err += c));
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the metering host ended (${code}): ${err.slice(0, 500)}`)));
  });
  return {
    async kill() {
      process.kill(-child.pid!, 'SIGKILL');
      await exited;
      children.delete(child.pid!);
    },
  };
}

test('kill -9 while metering into the outbox and writing it: every hour is in the registry exactly once', async () => {
  const r = rng(28_5);
  for (let round = 0; round < 6; round++) {
    const h = await host();
    const before = await written();
    const more = 1 + Math.floor(r() * 20);
    await until(`round ${round}: ${more} more entries`, async () => (await written()) >= before + more, 60_000, 5);
    // a moment inside the next charge or write (under 50 ms: the loop charges and writes continuously)
    await new Promise((res) => setTimeout(res, Math.floor(r() * 40)));
    await h.kill();
  }
  // the host's last start: what its outbox holds is written, once
  const store = openStore(dir);
  try {
    const billing = meterHost(store, pool);

    await billing.tick(store.billing.cursor('srv_kill')!.at + 1); // too short to charge: only writes the outbox
    assert.is(store.billing.pending(10).length, 0);
    const rows = (
      await pool.query<{ f: string; t: string }>(
        `SELECT period_from AS f, period_to AS t FROM ledger_entries WHERE account_id = 'acc_kill' ORDER BY period_from`,
      )
    ).rows.map((x) => [Number(x.f), Number(x.t)]);
    const start = T0 + HOUR; // the first pass only starts the meter
    const end = store.billing.cursor('srv_kill')!.at;
    assert.ok(rows.length > 20, `${rows.length} hours metered`);
    assert.is(rows[0][0], start);
    for (let i = 1; i < rows.length; i++) assert.is(rows[i][0], rows[i - 1][1], `hour ${i} starts where the one before ended`);
    assert.is(rows[rows.length - 1][1], end, 'the last entry ends at the meter cursor');
    assert.is(rows.length, (end - start) / HOUR);
    const money = (
      await pool.query<{ b: string; ram: string }>(`SELECT balance_usd AS b, ram_gb_hours AS ram FROM account_money WHERE account_id = 'acc_kill'`)
    ).rows[0];
    assert.is(Number(money.ram), rows.length);
    assert.is(Number(money.b), -Math.round((rows.length - 10) * 0.005 * 1e9) / 1e9, 'the hours past the grant, each paid once');
  } finally {
    await store.close();
  }
});

test.run();
