// Tombstones do not pile up (issue 35 item 10), against a real PostgreSQL. Caches here are
// driven by hand (`sync`, `record`, `prune`: no LISTEN, no timer), so which host has caught up to
// what is chosen by the test, not by timing.
//   - a host's start reads no tombstone: what was deleted before it started is simply absent;
//   - tombstones every live host has caught up past are pruned, one a live host has not passed is
//     kept; placement tombstones are kept (the wake fence still answers `deleted`);
//   - a host away (lease run out) while tombstones it had not seen were pruned reloads everything
//     at its next catch-up: what was deleted stays deleted, what lives is there, and it catches up
//     normally after;
//   - past the retention a tombstone is pruned even if a live host has not caught up past it.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { testKeys } from '../helpers/cluster.js';
import { claimName, migrate, PlacementCache, RegistryNames, RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { generateServerKeyPair } from '../../src/ssh/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';

let pg: TestPostgres;
const pools: RegistryPool[] = [];
let shared: RegistryShared;
let names: RegistryNames;

const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  pools.push(p);
  return p;
};
/** A cache of host `host` that moves only when the test says (`sync`, `record`, `prune`). */
const manual = (host: string, tombstoneRetentionMs?: number) =>
  new PlacementCache(pool(), { refreshMs: 60_000, connectTimeoutMs: 1000, host, tombstoneRetentionMs, pruneEveryMs: 0 });
/** Host `name` heartbeats (its own instance and run, as a daemon's claim does). */
const live = (name: string) =>
  claimName(
    pool(),
    { name, advertise: '127.0.0.1:1', publicIp: '127.0.0.1', version: 'test', capacity: {} },
    { instance: `ins_${name}`, run: `run_${name}`, fresh: false, held: false },
    { leaseMs: 60_000, replace: false },
  );
const tombstones = async (kind?: string) => Number(await pg.sql(`SELECT count(*) FROM changes WHERE payload IS NULL${kind ? ` AND kind = '${kind}'` : ''}`));

let n = 0;
const key = () => {
  const k = generateServerKeyPair(`t${++n}`);
  return { serverId: `srv-t${n}`, fingerprint: k.fingerprint, publicKey: k.publicKey };
};
const place = async (slug: string) => {
  const id = `srv-p${++n}`;
  assert.ok(await names.claim(slug, id));
  await names.place({ serverId: id, accountId: 'acct-t', slug, publicIp: '10.9.9.9' });
  return id;
};
const has = (c: PlacementCache, k: { fingerprint: string }) => c.keys.byFingerprint(k.fingerprint).length === 1;

test.before(async () => {
  pg = await startPostgres();
  await migrate(pool());
  shared = new RegistryShared(pool(), 'host-w', testKeys());
  names = new RegistryNames(pool(), 'host-w');
});
test.after(async () => {
  for (const p of pools) await p.end();
  await pg?.stop();
});

test('a host’s start reads no tombstone: what was deleted before it started is absent, what lives is there', async () => {
  const gone = Array.from({ length: 20 }, key);
  for (const k of gone) await shared.recordKey(k);
  for (const k of gone) await shared.removeKey(k.serverId);
  const kept = key();
  await shared.recordKey(kept);
  const slug = await place('start-gone');
  await names.remove(slug);
  await shared.claimDomain({ domain: 'gone.example.org', serverId: 'srv-d', accountId: 'acct-t', state: 'active' });
  await shared.releaseDomain('gone.example.org', 'srv-d');
  assert.ok((await tombstones()) >= 22);
  const c = new PlacementCache(pool(), { refreshMs: 60_000, connectTimeoutMs: 1000 });
  const read: string[] = [];
  const p = pools[pools.length - 1];
  const query = p.query.bind(p);
  p.query = (async (sql: string, params?: unknown[]) => {
    const r = await query(sql, params);
    for (const row of r.rows as { kind?: string; payload?: unknown }[]) if (row.kind) read.push(row.payload === null ? 'tombstone' : row.kind);
    return r;
  }) as typeof p.query;
  await c.sync();
  const dead = read.filter((k) => k === 'tombstone').length;
  console.log(`    a start with ${await tombstones()} tombstones in the registry read ${read.length} rows, ${dead} of them tombstones`);
  assert.is(dead, 0, 'no tombstone read at start');
  assert.ok(has(c, kept));
  for (const k of gone) assert.not.ok(has(c, k));
  assert.is(c.byServer(slug), undefined);
  assert.is(c.domains.get('gone.example.org'), undefined);
});

test('tombstones every live host caught up past are pruned, not one a live host has not; a host away past a prune reloads and keeps deleted things deleted', async () => {
  await live('host-x');
  await live('host-y');
  const x = manual('host-x');
  const y = manual('host-y');
  await x.sync();
  await y.sync();
  await x.record();
  await y.record();
  await x.prune(); // what the first test left (both hosts past it)
  const floor0 = Number(await pg.sql('SELECT version FROM tombstone_floor'));

  const [k1, k2, k3] = [key(), key(), key()];
  for (const k of [k1, k2, k3]) await shared.recordKey(k);
  await shared.claimDomain({ domain: 'one.example.org', serverId: 'srv-d1', accountId: 'acct-t', state: 'active' });
  await shared.putChallenge('tok-1', 'tok-1.thumb');
  const p1 = await place('pruned-one');
  await y.sync(); // y has the rows, not their deletes
  await y.record();
  await shared.removeKey(k1.serverId);
  await shared.releaseDomain('one.example.org', 'srv-d1');
  await shared.dropChallenge('tok-1');
  await names.remove(p1);
  const made = await tombstones();
  await x.sync();
  await x.record();
  assert.is(await x.prune(), 0, 'y, live, has not caught up past them');
  assert.is(await tombstones(), made);

  await y.sync();
  await y.record();
  assert.not.ok(has(y, k1));
  const pruned = await x.prune();
  assert.ok(pruned >= 3, `${pruned} pruned`); // the key's, the domain's, the challenge's
  assert.is(await tombstones(), await tombstones('placement'), 'only placement tombstones are left');
  assert.is(await names.fenceOf(p1), 'deleted', 'the fence still knows the deleted server');
  const floor1 = Number(await pg.sql('SELECT version FROM tombstone_floor'));
  assert.ok(floor1 > floor0);
  // both caches were past it: neither reloads
  await x.sync();
  await y.sync();
  assert.is(x.reloads + y.reloads, 0);

  // y goes away (its lease runs out); deletes it does not see are pruned meanwhile
  await pg.sql(`UPDATE hosts SET lease_until = now() - interval '1 second' WHERE name = 'host-y'`);
  const k4 = key();
  await shared.recordKey(k4);
  await shared.removeKey(k2.serverId);
  const p2 = await place('pruned-two');
  await shared.claimDomain({ domain: 'two.example.org', serverId: p2, accountId: 'acct-t', state: 'active' });
  await shared.releaseDomain('two.example.org', p2);
  await x.sync();
  await x.record();
  assert.ok((await x.prune()) >= 2, 'y, away, does not hold them');
  const floor2 = Number(await pg.sql('SELECT version FROM tombstone_floor'));
  assert.ok(floor2 > y.version, 'y is behind the floor');
  assert.ok(has(y, k2), 'y still has the deleted key in memory');

  // back: its catch-up reloads everything, deleted things stay deleted
  await live('host-y');
  await y.sync();
  assert.is(y.reloads, 1);
  assert.not.ok(has(y, k2));
  assert.not.ok(has(y, k1));
  assert.ok(has(y, k3) && has(y, k4));
  assert.is(y.byServer(p2)?.slug, 'pruned-two');
  assert.is(y.byServer(p1), undefined);
  assert.is(y.domains.get('two.example.org'), undefined);
  assert.is(y.challenges.get('tok-1'), undefined);
  assert.ok(y.version >= floor2);
  // and it follows changes as before, without another reload
  await shared.removeKey(k3.serverId);
  await y.sync();
  assert.not.ok(has(y, k3));
  assert.is(y.reloads, 1);
});

test('past the retention a tombstone is pruned though a live host has not caught up past it; that host reloads', async () => {
  await live('host-z'); // live, never caught up (its row says 0): only the retention prunes
  const z = manual('host-z');
  await z.sync();
  const k = key();
  await shared.recordKey(k);
  await z.sync();
  await shared.removeKey(k.serverId);
  const x = manual('host-x');
  await x.sync();
  await x.record();
  assert.is(await x.prune(), 0, 'host-z holds it within the retention');
  assert.ok((await tombstones('key')) >= 1);
  const short = manual('host-x', 1);
  await new Promise((r) => setTimeout(r, 20)); // older than the 1 ms retention (the registry's clock)
  assert.ok((await short.prune()) >= 1);
  assert.is(await tombstones('key'), 0);
  assert.ok(has(z, k));
  await z.sync();
  assert.is(z.reloads, 1);
  assert.not.ok(has(z, k));
});

test.run();
