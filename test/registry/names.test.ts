// Two daemons on one machine sharing a real PostgreSQL registry: a subdomain wanted on both at
// the same instant goes to exactly one server, each committed server has a placement naming its
// host, a delete frees the name for the other host, a registry that is down refuses create and
// delete with 503 registry_unavailable while the host keeps answering what it has, and a
// placement left by a create of this host's own instance cut off before its local commit is
// removed at the next start, while one another instance wrote under the same host name (a clone
// of the machine, a data dir that is not this one) is never removed for this store lacking its
// server; a server the registry places on another host is never placed back here.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // names and placement need no container
import { rmSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { HostDirectory, RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { initRegistry } from '../helpers/cluster.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let reused: string | undefined;
let pool: RegistryPool;

const opts = (host: string) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
});
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}) =>
  send(d.http, 'api.localhost', method, path, { body: o.body, headers: o.key ? { authorization: `Bearer ${o.key}` } : {} });

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  a = await startTestDaemon(opts('host-a'));
  b = await startTestDaemon(opts('host-b'));
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await pool?.end();
  await pg?.stop();
  if (reused) rmSync(reused, { recursive: true, force: true });
});

test('the same subdomain wanted on two hosts at the same instant goes to exactly one; its placement names that host', async () => {
  const [ra, rb] = await Promise.all([
    api(a, 'POST', '/create', { body: { subdomains: ['contested'] } }),
    api(b, 'POST', '/create', { body: { subdomains: ['contested'] } }),
  ]);
  assert.equal([ra.status, rb.status].sort(), [200, 409], `${ra.text} ${rb.text}`);
  const [won, winner] = ra.status === 200 ? [ra, 'host-a'] : [rb, 'host-b'];
  assert.is((rb.status === 409 ? rb : ra).json.error, 'subdomain_taken');
  assert.is(won.json.subdomain, 'contested.localhost');
  assert.is(await pg.sql(`SELECT host || ' ' || epoch || ' ' || slug FROM placements WHERE server_id = '${won.json.id}'`), `${winner} 1 contested`);

  // a delete frees the name for the other host
  const owner = winner === 'host-a' ? a : b;
  const other = winner === 'host-a' ? b : a;
  assert.is((await api(owner, 'DELETE', `/servers/${won.json.id}`, { key: won.json.api_key })).status, 200);
  assert.is(await pg.sql(`SELECT count(*) FROM placements WHERE server_id = '${won.json.id}'`), '0');
  const again = await api(other, 'POST', '/create', { body: { subdomains: ['contested'] } });
  assert.is(again.status, 200, again.text);
  assert.is(again.json.subdomain, 'contested.localhost');
});

test("a server created on one host is in the other host's placement cache with its owner, epoch and address; status counts it; a delete removes it", async () => {
  const made = await api(b, 'POST', '/create', { body: { subdomains: ['followed'] } });
  assert.is(made.status, 200, made.text);
  const cache = a.daemon.registry!.placements;
  const p = await until('the placement on host-a', () => cache.bySlug('followed'), 5_000, 5);
  assert.is(p.serverId, made.json.id);
  assert.is(p.host, 'host-b');
  assert.is(p.epoch, 1);
  assert.is(p.publicIp, '127.0.0.1');
  assert.is(cache.byServer(made.json.id)?.slug, 'followed');
  const hb = await until('host-b in the hosts view', () => cache.host('host-b'), 5_000, 5);
  assert.equal(hb, {
    name: 'host-b',
    advertise: await pg.sql(`SELECT advertise FROM hosts WHERE name = 'host-b'`),
    publicIp: '127.0.0.1',
    up: true,
    lease: true,
  });
  const listed = await new HostDirectory(pool, 3000).list();
  assert.is(listed.find((h) => h.name === 'host-b')?.servers, Number(await pg.sql(`SELECT count(*) FROM placements WHERE host = 'host-b'`)));
  assert.ok(listed.find((h) => h.name === 'host-b')!.servers >= 1);
  assert.is((await api(b, 'DELETE', `/servers/${made.json.id}`, { key: made.json.api_key })).status, 200);
  await until('the delete on host-a', () => cache.bySlug('followed') === undefined, 5_000, 5);
});

test('with the registry down, create and delete answer 503 registry_unavailable and the host still answers what it has', async () => {
  const made = await api(a, 'POST', '/create', { body: { subdomains: ['survivor'] } });
  assert.is(made.status, 200, made.text);
  await pg.halt();
  try {
    const create = await api(a, 'POST', '/create', { body: { subdomains: ['newcomer'] } });
    assert.is(create.status, 503, create.text);
    assert.is(create.json.error, 'registry_unavailable');
    assert.ok(Number(create.headers['retry-after']) >= 1);
    const del = await api(a, 'DELETE', `/servers/${made.json.id}`, { key: made.json.api_key });
    assert.is(del.status, 503);
    assert.is(del.json.error, 'registry_unavailable');
    const read = await api(a, 'GET', `/servers/${made.json.id}`, { key: made.json.api_key });
    assert.is(read.status, 200, 'the server is still there and readable');
    assert.is((await api(a, 'GET', '/healthz')).status, 200);
  } finally {
    await pg.start();
  }
  await until('the registry answers again', async () => (await api(a, 'POST', '/create', { body: { subdomains: ['newcomer'] } })).status === 200, 10_000, 200);
  assert.is((await api(a, 'DELETE', `/servers/${made.json.id}`, { key: made.json.api_key })).status, 200);
});

test("a placement and claim of this instance left by a create cut off before its local commit are removed at the host's next start (one at a later epoch marked lost); another instance's under the same name never are", async () => {
  const mine = b.daemon.registry!.identity.instance;
  await pg.sql(`INSERT INTO slugs (slug, server_id, host, instance) VALUES ('ghost', 'srv_0000ghost', 'host-b', '${mine}')`);
  await pg.sql(
    `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip, instance) VALUES ('srv_0000ghost', 'host-b', 1, 'acc_x', 'ghost', '127.0.0.1', '${mine}')`,
  );
  await pg.sql(`INSERT INTO slugs (slug, server_id, host, instance) VALUES ('halfway', 'srv_00halfway', 'host-b', '${mine}')`);
  // written under host-b by another instance (a clone of the machine with a data dir of its own):
  // this store lacking the server proves nothing, so it stays
  await pg.sql(`INSERT INTO slugs (slug, server_id, host, instance) VALUES ('clone', 'srv_0000clone', 'host-b', 'ins_other')`);
  await pg.sql(
    `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip, instance) VALUES ('srv_0000clone', 'host-b', 1, 'acc_x', 'clone', '127.0.0.1', 'ins_other')`,
  );
  await pg.sql(`INSERT INTO slugs (slug, server_id, host, instance) VALUES ('clonehalf', 'srv_clonehalf', 'host-b', 'ins_other')`);
  // a server of b's that the registry now places on another host (a newer epoch there)
  // placed here by this instance at epoch 3 (started, or handed over by another host's move) with no
  // record in this store (a move's target killed before its local commit): kept, marked lost —
  // never removed, whose tombstone would let the checkpoints' orphan sweep delete the server
  await pg.sql(`INSERT INTO slugs (slug, server_id, host, instance) VALUES ('handover', 'srv_0handover', 'host-b', '${mine}')`);
  await pg.sql(
    `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip, instance) VALUES ('srv_0handover', 'host-b', 3, 'acc_x', 'handover', '127.0.0.1', '${mine}')`,
  );
  const moved = await api(b, 'POST', '/create', { body: { subdomains: ['moved-away'] } });
  assert.is(moved.status, 200, moved.text);
  await pg.sql(`UPDATE placements SET host = 'host-z', epoch = 5 WHERE server_id = '${moved.json.id}'`);
  const dataDir = (reused = b.dataDir);
  const old = b;
  await old.daemon.stop(); // the same data dir and names start again
  // a daemon's stop leaves its servers running; these are plain processes the next daemon's
  // runtime does not adopt, so they end here
  await (old.daemon.runtime as unknown as ProcessRuntime).stopAll();
  b = await startTestDaemon({ ...opts('host-b'), dataDir });
  assert.is(b.daemon.registry!.identity.instance, mine, 'the same data dir is the same instance');
  assert.is(await pg.sql(`SELECT count(*) FROM placements WHERE server_id = 'srv_0000ghost'`), '0');
  assert.is(await pg.sql(`SELECT count(*) FROM slugs WHERE slug IN ('ghost', 'halfway')`), '0');
  assert.ok(b.logs.some((l) => l.msg === 'registry reconciled'));
  assert.is(
    await pg.sql(`SELECT host || ' ' || epoch || ' ' || instance FROM placements WHERE server_id = 'srv_0000clone'`),
    'host-b 1 ins_other',
    'not removed',
  );
  assert.is(await pg.sql(`SELECT count(*) FROM slugs WHERE slug IN ('clone', 'clonehalf')`), '2', 'not released');
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE key = 'srv_0000clone' AND payload IS NULL`), '0');
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${moved.json.id}'`), 'host-z 5', 'not taken back from the other host');
  assert.is(
    await pg.sql(`SELECT host || ' ' || epoch || ' ' || (lost_at IS NOT NULL) FROM placements WHERE server_id = 'srv_0handover'`),
    'host-b 3 true',
    'a placement at epoch 3 this store lacks is marked lost, not removed',
  );
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE key = 'srv_0handover' AND payload IS NULL`), '0', 'no tombstone');
  assert.is(await pg.sql(`SELECT count(*) FROM slugs WHERE slug = 'handover'`), '1', 'its name kept');
  assert.ok(b.logs.some((l) => String(l.msg).includes('places on another host') && JSON.stringify(l).includes(moved.json.id)));
});

test.run();
