// The placement cache against a real PostgreSQL (issue 29 item 3): a placement written by
// another host's registry appears in this host's cache through LISTEN/NOTIFY; changes made while
// the LISTEN connection was killed (pg_terminate_backend) or while PostgreSQL restarted are caught
// up by version; a slug deleted on one host and re-created on another converges to the new
// server; a host whose heartbeat stops shows down within its lease and one refresh.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { claimName, HostDirectory, migrate, PlacementCache, RegistryNames, RegistryPool } from '../../src/registry/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

let pg: TestPostgres;
const pools: RegistryPool[] = [];
const caches: PlacementCache[] = [];

const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 500, statementTimeoutMs: 2000 });
  pools.push(p);
  return p;
};
// no timer catch-up unless a test asks: only NOTIFY or a reconnect brings changes
const cache = async (refreshMs = 60_000) => {
  const c = new PlacementCache(pool(), { refreshMs, reconnectMs: 50, connectTimeoutMs: 500 });
  caches.push(c);
  await c.start();
  return c;
};
let n = 0;
const server = (slug: string) => ({ serverId: `srv-${++n}`, accountId: 'acct-1', slug, publicIp: `10.9.0.${n % 250}` });
/** Creates the way hosting does on `names`' host: the slug claimed, then the placement. */
const create = async (names: RegistryNames, slug: string) => {
  const s = server(slug);
  assert.ok(await names.claim(s.slug, s.serverId), `slug ${slug} free`);
  return names.place(s);
};

test.before(async () => {
  pg = await startPostgres();
  await migrate(pool());
});
test.after(async () => {
  for (const c of caches) await c.stop().catch(() => {});
  for (const p of pools) await p.end();
  await pg?.stop();
});

test('a placement written by another host appears in the cache without asking, and its delete removes it', async () => {
  const here = await cache();
  const b = new RegistryNames(pool(), 'host-b');
  const t0 = performance.now();
  const placed = await create(b, 'seen-from-a');
  const got = await until('placement in the cache', () => here.bySlug('seen-from-a'), 5_000, 1);
  const ms = performance.now() - t0;
  console.log(`    placement visible on the other host ${ms.toFixed(1)} ms after its create returned`);
  assert.equal(got, { ...placed, version: got.version });
  assert.is(here.byServer(placed.serverId)?.slug, 'seen-from-a');
  assert.ok(here.version >= got.version);
  await b.remove(placed.serverId);
  await until('delete seen', () => here.bySlug('seen-from-a') === undefined && here.byServer(placed.serverId) === undefined, 5_000, 1);
});

test('changes made while the LISTEN connection was killed are caught up after it reconnects', async () => {
  const here = await cache(); // only the reconnect brings them
  const b = new RegistryNames(pool(), 'host-b');
  const gone = await create(b, 'before-kill');
  await until('seen', () => here.bySlug('before-kill'));
  const listens = here.listens;
  // kill the LISTEN connection and write while it is away
  await pg.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`);
  const made = await create(b, 'while-away');
  await b.remove(gone.serverId);
  await until('reconnected', () => here.listens > listens, 10_000);
  await until('caught up', () => here.bySlug('while-away')?.serverId === made.serverId && !here.bySlug('before-kill'), 5_000);
  // and notifications flow again on the new connection
  const after = await create(b, 'after-reconnect');
  await until('live again', () => here.bySlug('after-reconnect')?.serverId === after.serverId, 5_000);
});

test('a slug deleted on one host and re-created on another converges to the new server; fresh() reads it at once', async () => {
  const here = await cache();
  const a = new RegistryNames(pool(), 'host-a');
  const b = new RegistryNames(pool(), 'host-b');
  const old = await create(a, 'moving');
  await until('old seen', () => here.bySlug('moving')?.serverId === old.serverId);
  await a.remove(old.serverId);
  const moved = await create(b, 'moving');
  const now = await here.fresh('moving');
  assert.is(now?.serverId, moved.serverId);
  assert.is(now?.host, 'host-b');
  assert.is(here.byServer(old.serverId), undefined, 'the old server is gone from the cache');
  assert.ok(moved.epoch >= 1);
});

test('a host whose heartbeat stops shows down within its lease and one refresh', async () => {
  const leaseMs = 600;
  const refreshMs = 100;
  const here = await cache(refreshMs);
  const hosts = new HostDirectory(pool(), leaseMs);
  const facts = { name: 'host-c', advertise: '127.0.0.1:7999', publicIp: '10.0.0.3', version: 'test', capacity: {} };
  const holder = { instance: 'ins_c', run: 'run_c', fresh: false, held: false };
  const asked = performance.now(); // the lease runs from the claim's transaction: after this
  await claimName(pool(), facts, holder, { leaseMs, replace: false });
  const beat = performance.now();
  await until('host-c up', () => here.host('host-c')?.up === true, 5_000, 5);
  assert.equal(here.host('host-c'), { name: 'host-c', advertise: '127.0.0.1:7999', publicIp: '10.0.0.3', up: true, lease: true });
  // the heartbeat stops here
  await until('host-c down', () => here.host('host-c')?.up === false, 5_000, 5);
  const downAt = performance.now();
  const ms = downAt - beat;
  console.log(`    host shown down ${ms.toFixed(0)} ms after its last heartbeat (lease ${leaseMs} ms, refresh ${refreshMs} ms)`);
  assert.ok(ms <= leaseMs + refreshMs + 300, `down after ${ms} ms`); // slack for a loaded machine
  // from before the claim (the lease cannot start earlier): the claim's own round trip, long on a
  // loaded machine, is not taken for the lease's
  const sinceAsked = downAt - asked;
  assert.ok(sinceAsked >= leaseMs - 10, `not before its lease ran out (${sinceAsked} ms after the claim was asked)`);
  // its servers show unavailable; a heartbeat brings it back
  const c = new RegistryNames(pool(), 'host-c');
  const s = await create(c, 'on-c');
  await until('placed', () => here.byServer(s.serverId));
  assert.is(here.state(s.serverId), 'unavailable');
  assert.is(here.countsByHost().get('host-c'), 1);
  assert.ok(await hosts.renew(facts, holder.run));
  await until('host-c up again', () => here.host('host-c')?.up === true, 5_000, 5);
  assert.is(here.state(s.serverId), undefined);
});

test('PostgreSQL restarted: the cache reconnects and catches up on what changed while it was down', async () => {
  const here = await cache();
  const b = new RegistryNames(pool(), 'host-b');
  const first = await create(b, 'pre-restart');
  await until('seen', () => here.bySlug('pre-restart'));
  const listens = here.listens;
  await pg.halt();
  await until('listen lost', () => !here.listening, 10_000);
  await pg.start();
  // written before the cache's LISTEN is back (another host may be quicker)
  const writer = new RegistryNames(pool(), 'host-b');
  const during = await until('write after restart', () => create(writer, 'post-restart').catch(() => undefined), 10_000, 20);
  await writer.remove(first.serverId);
  await until('reconnected', () => here.listens > listens, 10_000);
  await until('caught up', () => here.bySlug('post-restart')?.serverId === during.serverId && !here.bySlug('pre-restart'), 5_000);
});

test.run();
