// Server reservations in the registry (issue 35 review, finding 6), real PostgreSQL and LMDB:
//   - at start, the reservations of this host's earlier run are released only once the reconcile
//     proved this run holds the host's name: a run that does not hold it leaves the reservations
//     of the run that does (a create of theirs in flight keeps counting);
//   - a create whose key pair cannot be made gives its reservation back (it leaked until it
//     expired: the account or address counted one server more for the create's deadline).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loadConfig } from '../../src/config/index.js';
import { reconcileAtStart } from '../../src/hosting/registrysync.js';
import { Servers } from '../../src/hosting/servers.js';
import { createLogger } from '../../src/log/index.js';
import { RegistryNames, RegistryPool, RegistryQuotas } from '../../src/registry/index.js';
import type { Runtime } from '../../src/runtime/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { initRegistry } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';

let pg: TestPostgres;
let pool: RegistryPool;
let store: Store;
const dir = mkdtempSync(join(tmpdir(), 'rbx-startquota-'));
const log = createLogger({ level: 'error', sink: () => {} });
const cfg = loadConfig({ env: {}, overrides: { dataDir: dir, publicIp: '192.0.2.1' } });
// no server is made or deleted here: the runtime is never asked
const runtime = { get: () => undefined } as unknown as Runtime;

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  store = openStore(dir);
});
test.after(async () => {
  await store?.close();
  await pool?.end();
  await pg?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const holds = async () => Number(await pg.sql(`SELECT count(*) FROM quota_holds WHERE host = 'host-a'`));
const claim = (serverId: string) => ({ serverId, accountId: 'acc_live', maxPerAccount: 5, maxPerIp: 3, ttlMs: 3_600_000 });
const start = (held: boolean) =>
  reconcileAtStart(
    { names: new RegistryNames(pool, 'host-a', { instance: 'ins_a', held }), quotas: new RegistryQuotas(pool, 'host-a'), store, cfg, log, runtime },
    { delete: async () => {} },
  );

test("a run that does not hold its host name releases none of the name's reservations at start; one that holds it does", async () => {
  // the run holding host-a has a create in flight
  assert.is(await new RegistryQuotas(pool, 'host-a').reserveServer(claim('srv_live')), undefined);
  await start(false);
  assert.is(await holds(), 1, "the holder's reservation stays");
  await start(true);
  assert.is(await holds(), 0, "a run that holds the name releases its earlier run's");
});

test('a create whose key pair cannot be made gives its reservation back', async () => {
  const servers = new Servers({
    store,
    runtime,
    log,
    domain: 'example.test',
    brands: new Set(),
    maxServersPerAccount: 5,
    anonServersPerIp: 3,
    publicIp: '192.0.2.1',
    makeKeyPair: () => {
      throw new Error('no entropy today');
    },
    credits: () => ({ tier: 'anonymous', ram_gb_hours_left: 1, egress_gb_left: 1, balance_usd: 0 }),
    exposedPorts: () => [],
    release: async () => {},
    quotas: new RegistryQuotas(pool, 'host-a'),
  });
  const account = { id: 'acc_k', keyHash: 'h-acc_k', keyEnc: 'x', phone: null, createdIp: '192.0.2.9', createdAt: 0, balanceUsd: 0 };
  store.accounts.insert(account);
  const err = await servers.create(account, {}).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  assert.is(err?.message, 'no entropy today');
  assert.is(await holds(), 0, 'no reservation left behind');
});

test.run();
