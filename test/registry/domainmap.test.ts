// The cluster's custom-domain map every host keeps (schema 11) against a real PostgreSQL: a
// domain another host claims and activates is routed here (its server's placement) without
// asking, a detach removes it (tombstone), a state write that changes nothing is no new
// version, and changes made while the LISTEN connection was killed (pg_terminate_backend) are
// caught up once it is back; a watcher hears each change once per catch-up.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { migrate, PlacementCache, RegistryNames, RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { testKeys } from '../helpers/cluster.js';

let pg: TestPostgres;
const pools: RegistryPool[] = [];
let here: PlacementCache;
let names: RegistryNames;
let shared: RegistryShared;

const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 500, statementTimeoutMs: 2000 });
  pools.push(p);
  return p;
};

test.before(async () => {
  pg = await startPostgres();
  await migrate(pool());
  // no timer catch-up: only NOTIFY or a reconnect brings changes
  here = new PlacementCache(pool(), { refreshMs: 60_000, reconnectMs: 50, connectTimeoutMs: 500 });
  await here.start();
  names = new RegistryNames(pool(), 'host-b');
  shared = new RegistryShared(pool(), 'host-b', testKeys());
});
test.after(async () => {
  await here?.stop().catch(() => {});
  for (const p of pools) await p.end();
  await pg?.stop();
});

let n = 0;
async function serverOnB(slug: string) {
  const s = { serverId: `srv-d${++n}`, accountId: 'acct-d', slug, publicIp: '10.9.1.1' };
  assert.ok(await names.claim(s.slug, s.serverId));
  return names.place(s);
}

test('a domain another host activates is routed here to its server without asking; its detach removes it', async () => {
  const p = await serverOnB('blog');
  let heard = 0;
  here.domains.watch(() => heard++);
  assert.ok(await shared.claimDomain({ domain: 'blog.example.net', serverId: p.serverId, accountId: p.accountId, state: 'pending_dns' }));
  await until('the claim is seen', () => here.domains.get('blog.example.net'), 5000, 1);
  assert.is(here.domain('blog.example.net'), undefined, 'a pending domain is not routed');
  await shared.domainState('blog.example.net', p.serverId, 'active');
  const t0 = performance.now();
  const got = await until('routed', () => here.domain('blog.example.net'), 5000, 1);
  console.log(`    active on B → routed here ${(performance.now() - t0).toFixed(1)} ms later`);
  assert.equal([got.slug, got.host, got.serverId], ['blog', 'host-b', p.serverId]);
  assert.ok(heard >= 2, `${heard} changes heard`);
  // the same state again writes no version
  const v = here.version;
  await shared.domainState('blog.example.net', p.serverId, 'active');
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE kind = 'domain' AND version > ${v}`), '0');
  await shared.releaseDomain('blog.example.net', p.serverId);
  await until('detached', () => here.domains.get('blog.example.net') === undefined, 5000, 1);
  assert.is(here.domain('blog.example.net'), undefined);
});

test('changes made while the LISTEN connection was killed are caught up when it is back', async () => {
  const p = await serverOnB('shop');
  assert.ok(await shared.claimDomain({ domain: 'shop.example.net', serverId: p.serverId, accountId: p.accountId, state: 'active' }));
  assert.ok(await shared.claimDomain({ domain: 'old.example.net', serverId: p.serverId, accountId: p.accountId, state: 'active' }));
  await until('seen', () => here.domain('shop.example.net') && here.domain('old.example.net'), 5000, 1);
  const listens = here.listens;
  await pg.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`);
  await shared.releaseDomain('old.example.net', p.serverId);
  assert.ok(await shared.claimDomain({ domain: 'new.example.net', serverId: p.serverId, accountId: p.accountId, state: 'active' }));
  await until('reconnected', () => here.listens > listens, 10_000);
  await until('caught up', () => here.domain('new.example.net')?.slug === 'shop' && !here.domains.get('old.example.net'), 5000);
});

test.run();
