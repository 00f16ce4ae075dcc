// /credits `checkpoint_bytes` in cluster mode (issue 37): two daemons on one PostgreSQL, one
// account with a server on each; both answer the bytes the account's checkpoints hold on every
// host, the same figure, after a metering pass, and a checkpoint deleted on one host counts on
// the other at once (written when deleted, not a pass later), and a deleted server's stop counting.
// The checkpoints' records are put in each host's LMDB as a checkpoint's take writes them (the
// process runtime copies no disk).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { initRegistry } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { RegistryPool } from '../../src/registry/index.js';
import { until } from '../helpers/wait.js';

const MiB = 1 << 20;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;

const opts = (host: string) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
});
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}) =>
  send(d.http, 'api.localhost', method, path, { body: o.body, headers: o.key ? { authorization: `Bearer ${o.key}` } : {} });

test.before(async () => {
  pg = await startPostgres();
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  await pool.end();
  a = await startTestDaemon(opts('host-a'));
  b = await startTestDaemon(opts('host-b'));
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await pg?.stop();
});

test('two hosts answer the same /credits checkpoint_bytes: the account’s checkpoints on every host', async () => {
  const onA = await api(a, 'POST', '/create');
  assert.is(onA.status, 200, onA.text);
  const key = onA.json.api_key as string;
  const onB = await api(b, 'POST', '/create', { key });
  assert.is(onB.status, 200, onB.text);
  const account = a.daemon.store.servers.get(onA.json.id)!.accountId;
  assert.is(b.daemon.store.servers.get(onB.json.id)?.accountId, account, 'one account, a server on each host');
  const add = (d: TestDaemon, serverId: string, id: string, newBytes: number) =>
    d.daemon.store.checkpoints.add({ id, serverId, accountId: account, createdAt: Date.now(), kind: 'manual', sizeBytes: newBytes, newBytes });
  await add(a, onA.json.id, 'ckp_00000000a1000000000000', 3 * MiB);
  await add(b, onB.json.id, 'ckp_00000000b1000000000000', 5 * MiB);
  await add(b, onB.json.id, 'ckp_00000000b2000000000000', 7 * MiB);
  await Promise.all([a.daemon.billing.tick(), b.daemon.billing.tick()]);
  const bytes = async (d: TestDaemon) => {
    const r = await api(d, 'GET', '/credits', { key });
    assert.is(r.status, 200, r.text);
    return r.json.checkpoint_bytes as number;
  };
  assert.is(await bytes(a), 15 * MiB, 'host A counts host B’s checkpoints');
  assert.is(await bytes(b), 15 * MiB, 'host B counts host A’s: the same figure');
  // a checkpoint deleted on B (what the API's delete does past its checks; the process runtime
  // has no disk copies, so the route itself answers 503 here) counts on A at once, before B's next pass
  await b.daemon.hosting.core.checkpoints!.remove(b.daemon.store.servers.get(onB.json.id)!, 'ckp_00000000b2000000000000');
  await until('host A sees the delete on B', async () => (await bytes(a)) === 8 * MiB, 5_000, 50);
  assert.is(await bytes(b), 8 * MiB);
  // a deleted server's checkpoints stop counting everywhere
  assert.is((await api(b, 'DELETE', `/servers/${onB.json.id}`, { key })).status, 200);
  await until('host A sees the server gone on B', async () => (await bytes(a)) === 3 * MiB, 5_000, 50);
});

test.run();
