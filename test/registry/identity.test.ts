// A host name is an identity (issue 35): two daemons on one real PostgreSQL registry under one
// cluster host name — a cloned VM keeps the machine's hostname, the default name. The second is
// refused (host_name_taken, naming the first's address) and changes nothing: the first keeps
// every server, placement and disk, also across its own restart. A fresh data dir under a name
// another data dir held is refused (host_replace_needed) unless the operator says
// --replace-host, which marks the old servers lost instead of deleting anything; the old data
// dir is then refused while the new one holds the name. A copy of a running host's data dir (its
// instance id) is refused too, once it saw the holder heartbeat; a restart after a kill -9 (the
// lease still running, no heartbeat any more) is not. A replaced host's data dir restored without
// its instance id (a backup on a new machine) takes the name with --replace-host and its lost
// servers are its own again.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // names and leases need no container
import { copyFileSync, cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { registryChecks, RegistryPool } from '../../src/registry/index.js';
import { initRegistry } from '../helpers/cluster.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

let pg: TestPostgres;
const running: TestDaemon[] = [];
const kept: string[] = [];
let first: TestDaemon;
let holder: TestDaemon;
let last: TestDaemon;
let ids: string[] = [];
const keys = new Map<string, string>();

const opts = (port: number, extra: Record<string, unknown> = {}) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host: 'host-a', advertise: `127.0.0.1:${port}`, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s', ...extra },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
});
async function start(o: Record<string, unknown>): Promise<TestDaemon> {
  const d = await startTestDaemon(o);
  running.push(d);
  return d;
}
async function refused(o: Record<string, unknown>): Promise<{ code: string; message: string }> {
  const err = await startTestDaemon(o).then(
    (d) => (running.push(d), undefined),
    (e: unknown) => e,
  );
  assert.ok(isAppError(err), `refused: ${String(err)}`);
  return { code: err.code, message: err.message };
}
/** Every placement of host-a as the registry has it, every column. */
const rows = () => pg.sql(`SELECT coalesce(string_agg(to_jsonb(p)::text, ',' ORDER BY server_id), '') FROM placements p WHERE host = 'host-a'`);
/** Every placement of host-a: id, host, epoch, instance, lost. */
const placements = () =>
  pg.sql(
    `SELECT coalesce(string_agg(server_id || ' ' || host || ' ' || epoch || ' ' || instance || ' ' || (lost_at IS NOT NULL), ',' ORDER BY server_id), '') FROM placements WHERE host = 'host-a'`,
  );
async function stopKeeping(d: TestDaemon): Promise<void> {
  await d.daemon.stop();
  await (d.daemon.runtime as unknown as ProcessRuntime).stopAll();
  running.splice(running.indexOf(d), 1);
}

test.before(async () => {
  pg = await startPostgres();
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool); // the schema and the tests' cluster token, as `rootbox cluster init` makes them
  await pool.end();
  first = await start(opts(17001));
  for (const sub of ['kept-one', 'kept-two']) {
    const r = await send(first.http, 'api.localhost', 'POST', '/create', { body: { subdomains: [sub] } });
    assert.is(r.status, 200, r.text);
    ids.push(r.json.id as string);
    keys.set(r.json.id as string, r.json.api_key as string);
  }
  ids = ids.sort();
});
test.after(async () => {
  for (const d of running.splice(0)) await d.stop().catch(() => {});
  for (const dir of kept) rmSync(dir, { recursive: true, force: true });
  await pg?.stop();
});

test("a second daemon under a live host's name is refused with host_name_taken naming the holder; the first keeps every server, placement and disk", async () => {
  const before = await rows();
  assert.is(await pg.sql(`SELECT count(*) FROM placements WHERE host = 'host-a'`), '2');

  const second = await refused(opts(17002));
  assert.is(second.code, 'host_name_taken');
  assert.match(second.message, '127.0.0.1:17001');

  assert.is(await rows(), before, 'no placement changed');
  const instance = first.daemon.registry!.identity.instance;
  assert.ok(existsSync(join(first.dataDir, 'cluster-instance')));
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE payload IS NULL`), '0', 'none deleted');
  assert.is(
    await pg.sql(`SELECT instance || ' ' || advertise || ' ' || (lease_until > now()) FROM hosts WHERE name = 'host-a'`),
    `${instance} 127.0.0.1:17001 true`,
  );
  for (const id of ids) {
    assert.is(first.daemon.runtime.get(id)?.state, 'running');
    const r = await send(first.http, 'api.localhost', 'GET', `/servers/${id}`, { headers: { authorization: `Bearer ${keys.get(id)}` } });
    assert.is(r.status, 200, r.text);
  }

  // the first host's next start (where main deleted their disks) keeps them all
  const dataDir = first.dataDir;
  kept.push(dataDir);
  await stopKeeping(first);
  first = await start({ ...opts(17001), dataDir });
  assert.is(first.daemon.registry!.identity.instance, instance, 'the same data dir is the same instance');
  assert.is(await rows(), before);
  for (const id of ids) {
    assert.ok(first.daemon.store.servers.get(id), `${id} is still in the store`);
    assert.ok(existsSync(join(dataDir, 'processes', id, 'rootfs')), `${id}'s disk is still there`);
  }
});

test('a fresh data dir under a name another data dir held is refused; with --replace-host its servers are marked lost, not deleted', async () => {
  await stopKeeping(first); // a clean stop: the lease ends at once
  const before = await rows();

  const fresh = await refused(opts(17003));
  assert.is(fresh.code, 'host_replace_needed');
  assert.match(fresh.message, '--replace-host');
  assert.is(await rows(), before, 'nothing changed');
  const old = await pg.sql(`SELECT instance FROM hosts WHERE name = 'host-a'`);
  // doctor says so before the start, and says the data dir that held it may start
  const doctor = async (dataDir: string) =>
    (await registryChecks({ registry: pg.url, host: 'host-a', lease: 3000, connectTimeout: 500, statementTimeout: 2000 }, { dataDir })).find(
      (c) => c.name === 'cluster host name',
    )!;
  const empty = mkdtempSync(join(tmpdir(), 'rbx-empty-'));
  kept.push(empty);
  const check = await doctor(empty);
  assert.is(check.ok, false);
  assert.match(check.detail, `host-a is known from another data dir (instance ${old}`);
  assert.match(check.fix, '--replace-host');
  assert.is((await doctor(kept[0])).ok, true, check.detail);

  const replacing = (holder = await start(opts(17003, { replaceHost: true })));
  const instance = replacing.daemon.registry!.identity.instance;
  assert.not.equal(instance, old);
  assert.is(await placements(), ids.map((id) => `${id} host-a 1 ${old} true`).join(','), 'kept, marked lost');
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE payload IS NULL`), '0', 'none deleted');
  assert.is(await pg.sql(`SELECT count(*) FROM slugs WHERE slug IN ('kept-one', 'kept-two')`), '2', 'their names stay taken');
  assert.is(await pg.sql(`SELECT instance FROM hosts WHERE name = 'host-a'`), instance);
  assert.ok(replacing.logs.some((l) => String(l.msg).startsWith('host name taken over from another instance') && l.lost === 2));

  // the old data dir does not come back under the name while the new one holds it
  const back = await refused({ ...opts(17001), dataDir: kept[0] });
  assert.is(back.code, 'host_name_taken');
  assert.match(back.message, '127.0.0.1:17003');
  assert.is(await pg.sql(`SELECT instance FROM hosts WHERE name = 'host-a'`), instance);
});

test("a copy of a live host's data dir (the same instance) is refused once the holder heartbeats; a restart after a kill -9 is not", async () => {
  const dataDir = holder.cfg.dataDir;
  const instance = holder.daemon.registry!.identity.instance;
  const copy = mkdtempSync(join(tmpdir(), 'rbx-copy-'));
  kept.push(copy, dataDir);
  copyFileSync(join(dataDir, 'cluster-instance'), join(copy, 'cluster-instance'));
  const cloned = await refused({ ...opts(17004), dataDir: copy });
  assert.is(cloned.code, 'host_name_taken');
  assert.match(cloned.message, '127.0.0.1:17003');
  assert.is(await pg.sql(`SELECT run FROM hosts WHERE name = 'host-a'`), holder.daemon.registry!.identity.run, 'the holder keeps its lease');

  // the holder dies without releasing its lease (as a kill -9 leaves it): its own restart goes on
  await stopKeeping(holder);
  await pg.sql(`UPDATE hosts SET run = 'run_killed', lease_until = now() + interval '1 minute' WHERE name = 'host-a'`);
  const again = (last = await start({ ...opts(17003), dataDir }));
  assert.is(again.daemon.registry!.identity.instance, instance);
  assert.is(await pg.sql(`SELECT run FROM hosts WHERE name = 'host-a'`), again.daemon.registry!.identity.run);

  // another run takes the name (its lease had run out during a partition): this one stops
  // renewing it and writes nothing more under it
  await pg.sql(`UPDATE hosts SET run = 'run_other' WHERE name = 'host-a'`);
  await until('the heartbeat finds the name taken', () => !again.daemon.registry!.up, 5000);
  assert.ok(again.logs.some((l) => l.msg === 'registry refused' && String(l.detail).startsWith('another run or instance holds the host name host-a')));
  const create = await send(again.http, 'api.localhost', 'POST', '/create', { body: {} });
  assert.is(create.status, 503, create.text);
  assert.is(await pg.sql(`SELECT run FROM hosts WHERE name = 'host-a'`), 'run_other', 'not renewed over the other');
});

test("the replaced host's data dir restored without its instance id takes the name with --replace-host: its lost servers are placed for it again", async () => {
  await stopKeeping(last);
  await pg.sql(`UPDATE hosts SET lease_until = now() WHERE name = 'host-a'`); // the run that took it is gone too
  const restored = mkdtempSync(join(tmpdir(), 'rbx-restored-'));
  kept.push(restored);
  cpSync(kept[0], restored, { recursive: true, filter: (src) => !/(cluster-instance|admin\.sock)$/.test(src) });
  const d = await start({ ...opts(17005, { replaceHost: true }), dataDir: restored });
  const instance = d.daemon.registry!.identity.instance;
  assert.is(await placements(), ids.map((id) => `${id} host-a 2 ${instance} false`).join(','), 'its own again, from the epoch it read');
  assert.is(await pg.sql(`SELECT count(*) FROM slugs WHERE instance = '${instance}' AND slug IN ('kept-one', 'kept-two')`), '2');
  for (const id of ids) {
    const r = await send(d.http, 'api.localhost', 'GET', `/servers/${id}`, { headers: { authorization: `Bearer ${keys.get(id)}` } });
    assert.is(r.status, 200, r.text);
  }
});

test.run();
