// The cluster registry on a real PostgreSQL (Debian's, started by the test): versioned schema
// applied once however many hosts initialise at once, a registry with no schema or a newer one
// refused, hosts registered with leases on the registry's clock, a clean stop releasing the
// lease at once, a registry that is down at start joined when it comes back, and the URL's
// password never written to the log.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { createLogger } from '../../src/log/index.js';
import {
  storeToken,
  KNOWN_VERSION,
  MIGRATIONS,
  migrate,
  Registry,
  RegistryNames,
  RegistryPayments,
  RegistryPool,
  schemaVersion,
  type RegistryOptions,
} from '../../src/registry/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { testKeys } from '../helpers/cluster.js';

let pg: TestPostgres;
const lines: string[] = [];
const log = createLogger({ level: 'debug', sink: (l) => lines.push(l) });
const pools: RegistryPool[] = [];
const registries: Registry[] = [];

const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  pools.push(p);
  return p;
};
const dirs: string[] = [];
const dir = () => (dirs.push(mkdtempSync(join(tmpdir(), 'rbx-registry-'))), dirs[dirs.length - 1]);
const registry = (host: string, o: Partial<RegistryOptions> = {}) => {
  const r = new Registry(
    {
      url: pg.url,
      host,
      advertise: `127.0.0.1:${7000 + registries.length}`,
      publicIp: '127.0.0.1',
      version: 'test',
      leaseMs: 900,
      connectTimeoutMs: 500,
      statementTimeoutMs: 2000,
      capacity: () => ({ memoryFreeBytes: 1 << 30 }),
      dataDir: dir(),
      replaceHost: false,
      keys: testKeys(),
      ...o,
    },
    log,
  );
  registries.push(r);
  return r;
};
const code = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: unknown) => (isAppError(e) ? e.code : String(e)),
  );

test.before(async () => {
  pg = await startPostgres();
});
test.after(async () => {
  for (const r of registries) await r.stop().catch(() => {});
  for (const p of pools) await p.end();
  await pg?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('a host refuses a registry that was never initialised', async () => {
  assert.is(await schemaVersion(pool()), 0);
  assert.is(await code(registry('early').start()), 'registry_not_initialized');
});

test('init applies every migration once, even when two hosts run it at the same instant', async () => {
  const [a, b] = await Promise.all([migrate(pool()), migrate(pool())]);
  assert.equal(
    [...a, ...b].sort((x, y) => x - y),
    MIGRATIONS.map((m) => m.version),
  );
  assert.equal(await migrate(pool()), []);
  assert.is(await schemaVersion(pool()), KNOWN_VERSION);
  assert.is(await pg.sql('SELECT count(*) FROM rootbox_schema'), String(MIGRATIONS.length));
  await storeToken(pool(), testKeys()); // the rest of init: the cluster token's verifier
});

test('hosts register with a lease on the registry clock; a clean stop shows the host down at once; a lapsed lease shows down', async () => {
  const a = registry('host-a');
  const b = registry('host-b');
  await a.start();
  await b.start();
  const hosts = await a.hosts.list();
  assert.equal(
    hosts.map((h) => [h.name, h.up, h.publicIp, h.capacity.memoryFreeBytes]),
    [
      ['host-a', true, '127.0.0.1', 1 << 30],
      ['host-b', true, '127.0.0.1', 1 << 30],
    ],
  );
  const before = hosts.find((h) => h.name === 'host-b')!.heartbeatAt.getTime();
  await until(
    'host-b renews its lease',
    async () => ((await a.hosts.list()).find((h) => h.name === 'host-b')!.heartbeatAt.getTime() > before ? true : false),
    5000,
  );
  await b.stop();
  assert.is((await a.hosts.list()).find((h) => h.name === 'host-b')!.up, false, 'released on stop');
  // host-c stops renewing without releasing (as a host that died): down once its lease runs out
  await pg.sql(
    `INSERT INTO hosts (name, advertise, public_ip, version, started_at, heartbeat_at, lease_until) VALUES ('host-c', '127.0.0.1:1', '127.0.0.1', 'x', now(), now(), now() + interval '300 milliseconds')`,
  );
  assert.is((await a.hosts.list()).find((h) => h.name === 'host-c')!.up, true);
  await until('host-c is down', async () => (await a.hosts.list()).find((h) => h.name === 'host-c')!.up === false, 5000);
});

test('a slug wanted by two hosts at the same instant goes to exactly one server; a release frees it', async () => {
  const a = new RegistryNames(pool(), 'host-a');
  const b = new RegistryNames(pool(), 'host-b');
  const tries = Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).claim('blog', `srv_${i}`));
  const won = (await Promise.all(tries)).filter(Boolean).length;
  assert.is(won, 1);
  const holder = await pg.sql("SELECT server_id || ' ' || host FROM slugs WHERE slug = 'blog'");
  const [id, host] = holder.split(' ');
  const owner = host === 'host-a' ? a : b;
  const other = host === 'host-a' ? b : a;
  await other.release('blog', id); // another host cannot give it back
  assert.is(await other.claim('blog', 'srv_x'), false);
  await owner.release('blog', id);
  assert.is(await other.claim('blog', 'srv_x'), true);
});

test('a placement has one host and an epoch that grows when it is placed again, only from the epoch the writer read; orphan claims of a crashed create are released', async () => {
  const a = new RegistryNames(pool(), 'host-a');
  const b = new RegistryNames(pool(), 'host-b');
  assert.ok(await a.claim('shop', 'srv_shop'));
  const shop = { serverId: 'srv_shop', accountId: 'acc_1', slug: 'shop', publicIp: '192.0.2.2' };
  assert.is((await a.place({ ...shop, publicIp: '192.0.2.1' })).epoch, 1);
  // another host does not take it without the epoch it read, nor with a stale one
  assert.is(await code(b.place(shop)), 'placement_conflict');
  assert.is(await code(b.place(shop, 0)), 'placement_conflict');
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = 'srv_shop'`), 'host-a 1', 'left as it was');
  assert.is((await b.place(shop, 1)).epoch, 2);
  const p = await a.placement('srv_shop');
  assert.equal([p?.host, p?.epoch, p?.publicIp], ['host-b', 2, '192.0.2.2']);
  assert.equal([...(await b.placedHere()).entries()], [['srv_shop', 2]]);
  assert.ok(await a.claim('half', 'srv_half')); // a create that crashed before its placement
  assert.ok(await a.claim('kept', 'srv_kept')); // one still being made
  assert.equal(await a.releaseOrphans(new Set(['srv_kept', 'srv_x'])), ['half']); // srv_x: the slug test's last claim, on whichever host lost its race
  assert.ok(await b.claim('half', 'srv_other'));
  await b.remove('srv_shop');
  assert.is(await a.placement('srv_shop'), undefined);
});

test('the same payment presented to two hosts at once is locked by exactly one; only an unused lock of its own host is given back', async () => {
  const a = new RegistryPayments(pool(), 'host-a');
  const b = new RegistryPayments(pool(), 'host-b');
  const key = 'base:0xpayer:0xnonce';
  const got = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? a : b).lock(key)));
  assert.is(got.filter(Boolean).length, 1);
  const owner = (await pg.sql(`SELECT host FROM payment_locks WHERE key = '${key}'`)) === 'host-a' ? a : b;
  const other = owner === a ? b : a;
  await other.unlock(key);
  assert.is(await other.lock(key), false, 'another host cannot unlock it');
  await owner.used(key);
  await owner.unlock(key);
  assert.is(await other.lock(key), false, 'a used lock stays');
});

test('a registry with a newer schema than this rootbox knows is refused, by start and by init', async () => {
  await pg.sql(`INSERT INTO rootbox_schema (version, about) VALUES (${KNOWN_VERSION + 1}, 'from the future')`);
  try {
    assert.is(await code(registry('late').start()), 'registry_too_new');
    assert.is(await code(migrate(pool())), 'registry_too_new');
  } finally {
    await pg.sql(`DELETE FROM rootbox_schema WHERE version = ${KNOWN_VERSION + 1}`);
  }
});

test('a registry with a change this rootbox does not know below the highest it knows is refused too (versions are not a line)', async () => {
  await pg.sql(`INSERT INTO rootbox_schema (version, about) VALUES (9, 'from another branch')`);
  try {
    assert.is(await code(registry('late').start()), 'registry_too_new');
    assert.is(await code(migrate(pool())), 'registry_too_new');
  } finally {
    await pg.sql(`DELETE FROM rootbox_schema WHERE version = 9`);
  }
});

test('a registry that is down at start does not stop the host; it registers as soon as the registry is back', async () => {
  await pg.halt();
  const r = registry('host-d');
  try {
    await r.start(); // resolves: the host serves what it has
    assert.is(r.up, false);
    assert.ok(lines.some((l) => l.includes('registry unreachable')));
  } finally {
    await pg.start();
  }
  await until('host-d registered', () => r.up, 10_000);
  const d = (await r.hosts.list()).find((h) => h.name === 'host-d');
  assert.ok(d?.up);
});

test("the registry URL's password is never in the log", () => {
  assert.ok(lines.length > 0);
  for (const l of lines) assert.not.ok(l.includes(pg.password), l);
  assert.ok(lines.some((l) => l.includes('rootbox:***@127.0.0.1')));
});

test.run();
