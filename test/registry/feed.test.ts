// The registry's one change feed (schema 17, issue 35 item 11) against a real PostgreSQL:
//   - a registry made by the schemas before it (per-table versions, placement_tombstones, three
//     trigger functions) upgrades in place: every record and tombstone is in `changes` at the
//     version it had, the versions go on from there, and exactly one trigger function is left,
//     on every followed table;
//   - a change of each kind (placement with its slug, custom domain, server key, HTTP-01 answer,
//     account key) reaches a cache that missed every notification through its catch-up, and so do
//     their deletes (tombstones, no reload), as they reach a listening cache through NOTIFY;
//   - a write that changes nothing a cache keeps (a lost ON CONFLICT, an update of other columns)
//     writes no version; a change whose payload does not fit its kind is skipped, not fatal;
//   - a full load reads no tombstone, however many placement tombstones are kept (schema 18).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { migrate, MIGRATIONS, PlacementCache, RegistryAccounts, RegistryNames, RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { generateServerKeyPair } from '../../src/ssh/index.js';
import { CATCH_UP, NO_TOMBSTONES } from '../../src/registry/feed.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { testKeys } from '../helpers/cluster.js';
import { until } from '../helpers/wait.js';

let pg: TestPostgres;
const pools: RegistryPool[] = [];
const caches: PlacementCache[] = [];
let names: RegistryNames;
let shared: RegistryShared;
let accounts: RegistryAccounts;

const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  pools.push(p);
  return p;
};
/** A cache that hears nothing: no LISTEN, no timer; only `sync()` (a catch-up) moves it. */
const deaf = () => {
  const c = new PlacementCache(pool(), { refreshMs: 60_000, connectTimeoutMs: 1000, pruneEveryMs: 0 });
  caches.push(c);
  return c;
};
let n = 0;
const hash = (s: string) => createHash('sha256').update(s).digest('hex');
const account = (id: string) => ({ id, keyHash: hash(id), keyEnc: 'sealed', phone: null, createdIp: '192.0.2.1', createdAt: Date.now() });
/** One record of each kind, written by the registry's own writers; answers what to look for. */
const writeEach = async (tag: string) => {
  const id = `srv-${tag}-${++n}`;
  const slug = `${tag}-${n}`;
  assert.ok(await names.claim(slug, id));
  await names.place({ serverId: id, accountId: `acct-${tag}`, slug, publicIp: '10.9.0.1' });
  const domain = `${tag}-${n}.example.org`;
  assert.ok(await shared.claimDomain({ domain, serverId: id, accountId: `acct-${tag}`, state: 'active' }));
  const k = generateServerKeyPair(`${tag}${n}`);
  await shared.recordKey({ serverId: id, fingerprint: k.fingerprint, publicKey: k.publicKey });
  const token = `tok-${tag}-${n}`;
  await shared.putChallenge(token, `${token}.thumb`);
  const acct = account(`acct-${tag}-${n}`);
  await accounts.insert(acct);
  return { id, slug, domain, fingerprint: k.fingerprint, token, acct };
};
type Written = Awaited<ReturnType<typeof writeEach>>;
/** What cache `c` knows of `w`, kind by kind. */
const known = (c: PlacementCache, w: Written) => ({
  placement: c.bySlug(w.slug)?.serverId === w.id,
  domain: c.domain(w.domain)?.serverId === w.id,
  key: c.keys.byFingerprint(w.fingerprint)[0]?.serverId === w.id,
  challenge: c.challenges.get(w.token) === `${w.token}.thumb`,
  account: c.accountKeys.byHash(w.acct.keyHash) === w.acct.id,
});
const all = (v: boolean) => ({ placement: v, domain: v, key: v, challenge: v, account: v });
const removeEach = async (w: Written) => {
  await names.remove(w.id);
  await shared.releaseDomain(w.domain, w.id);
  await shared.removeKey(w.id);
  await shared.dropChallenge(w.token);
  await accounts.remove(w.acct.id);
};

test.before(async () => {
  pg = await startPostgres();
  names = new RegistryNames(pool(), 'host-w');
  shared = new RegistryShared(pool(), 'host-w', testKeys());
  accounts = new RegistryAccounts(pool(), 'host-w');
});
test.after(async () => {
  for (const c of caches) await c.stop().catch(() => {});
  for (const p of pools) await p.end();
  await pg?.stop();
});

test('a registry of the schemas before the one feed upgrades in place: every record and tombstone kept at its version, one trigger function left', async () => {
  // the registry as the schemas up to 16 made it (as `cluster init` did then)
  const p = pool();
  await p.query('CREATE TABLE rootbox_schema (version int PRIMARY KEY, about text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
  for (const m of MIGRATIONS.filter((x) => x.version <= 16))
    await p.tx(async (c) => {
      await c.query(m.sql);
      await c.query('INSERT INTO rootbox_schema (version, about) VALUES ($1, $2)', [m.version, m.about]);
    });
  const kept = await writeEach('old');
  const gone = await writeEach('old');
  await removeEach(gone);
  const old = await pg.sql(`
    SELECT string_agg(v::text, ',') FROM (
      SELECT version AS v FROM placements WHERE server_id = '${kept.id}'
      UNION ALL SELECT version FROM custom_domains WHERE domain = '${kept.domain}'
      UNION ALL SELECT version FROM server_keys WHERE server_id = '${kept.id}'
      UNION ALL SELECT version FROM acme_challenges WHERE token = '${kept.token}'
      UNION ALL SELECT version FROM accounts WHERE id = '${kept.acct.id}') x`);
  const oldTombstones = await pg.sql(`SELECT string_agg(kind || ' ' || version, ',' ORDER BY version) FROM placement_tombstones WHERE kind <> 's'`);
  const top = Number(await pg.sql('SELECT last_value FROM placement_version_seq'));

  assert.equal(
    await migrate(p),
    MIGRATIONS.map((m) => m.version).filter((v) => v > 16),
  ); // 17, and what came after
  const now = await pg.sql(`
    SELECT string_agg(version::text, ',') FROM (
      SELECT version FROM changes WHERE kind = 'placement' AND key = '${kept.id}'
      UNION ALL SELECT version FROM changes WHERE kind = 'domain' AND key = '${kept.domain}'
      UNION ALL SELECT version FROM changes WHERE kind = 'key' AND key = '${kept.id}'
      UNION ALL SELECT version FROM changes WHERE kind = 'challenge' AND key = '${kept.token}'
      UNION ALL SELECT version FROM changes WHERE kind = 'account' AND key = '${kept.acct.id}') x`);
  assert.is(now, old, 'every record at the version it had');
  const letter: Record<string, string> = { placement: 'p', domain: 'd', key: 'k', challenge: 'c', account: 'a' };
  const tombstones = (await pg.sql(`SELECT string_agg(kind || ' ' || version, ',' ORDER BY version) FROM changes WHERE payload IS NULL`))
    .split(',')
    .map((x) => `${letter[x.split(' ')[0]]} ${x.split(' ')[1]}`)
    .join(',');
  assert.is(tombstones, oldTombstones, 'every tombstone at the version it had');

  // one trigger function, on every followed table; the old ones, their table and columns gone
  assert.is(
    await pg.sql(`SELECT string_agg(DISTINCT p.proname, ',') FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid WHERE NOT t.tgisinternal`),
    'rootbox_change',
  );
  assert.is(
    await pg.sql(`SELECT string_agg(tgrelid::regclass::text, ',' ORDER BY tgrelid::regclass::text) FROM pg_trigger WHERE NOT tgisinternal`),
    'accounts,acme_challenges,custom_domains,placements,server_keys',
  );
  assert.is(await pg.sql(`SELECT count(*) FROM pg_proc WHERE prorettype = 'trigger'::regtype AND pronamespace = 'public'::regnamespace`), '1');
  assert.is(await pg.sql(`SELECT coalesce(to_regclass('placement_tombstones')::text, 'none')`), 'none');
  assert.is(
    await pg.sql(
      `SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND column_name = 'version' AND table_name <> 'certificates' AND table_name <> 'rootbox_schema' AND table_name <> 'changes' AND table_name <> 'tombstone_floor' AND table_name <> 'hosts'`,
    ),
    '0',
  );

  // a cache of the new code loads it whole: what lives is there, what was deleted is not
  const c = deaf();
  await c.sync();
  assert.equal(known(c, kept), all(true));
  assert.equal(known(c, gone), all(false));
  assert.ok(c.version >= top);
  // and the versions go on from where they were
  const next = await writeEach('new');
  await c.sync();
  assert.equal(known(c, next), all(true));
  assert.ok(Number(await pg.sql(`SELECT min(version) FROM changes WHERE key IN ('${next.id}', '${next.domain}', '${next.token}', '${next.acct.id}')`)) > top);
});

test('a change of each kind, and its delete, reaches a cache that missed every notification through the catch-up, as NOTIFY brings it to a listening one', async () => {
  const listening = new PlacementCache(pool(), { refreshMs: 60_000, reconnectMs: 50, connectTimeoutMs: 1000, pruneEveryMs: 0 });
  caches.push(listening);
  await listening.start();
  const away = deaf();
  await away.sync();
  const before = away.version;

  const w = await writeEach('each');
  await until('the listening cache has every kind', () => Object.values(known(listening, w)).every(Boolean), 5000, 5);
  assert.equal(known(away, w), all(false), 'nothing reached the deaf cache by itself');
  await away.sync();
  assert.equal(known(away, w), all(true), 'the catch-up brought every kind');
  assert.is(away.bySlug(w.slug)?.slug, w.slug);
  assert.ok(away.version > before);

  // changes and deletes of each kind: tombstones above `seen`, read without a reload
  await shared.domainState(w.domain, w.id, 'pending_dns');
  const rotated = hash(`${w.acct.id}-2`);
  assert.ok(await accounts.rotateKey(w.acct.id, rotated, 'sealed-2'));
  await away.sync();
  assert.is(away.domains.get(w.domain)?.state, 'pending_dns');
  assert.is(away.domain(w.domain), undefined, 'no longer active');
  assert.is(away.accountKeys.byHash(rotated), w.acct.id);
  assert.is(away.accountKeys.byHash(w.acct.keyHash), undefined, 'the old key hash is gone');
  await removeEach({ ...w, acct: { ...w.acct, keyHash: rotated } });
  await away.sync();
  assert.equal(known(away, w), all(false));
  assert.is(away.domains.get(w.domain), undefined);
  assert.is(away.byServer(w.id), undefined);
  assert.is(away.reloads, 0);
  await until('the listening cache saw the deletes', () => !Object.values(known(listening, w)).some(Boolean), 5000, 5);
});

test('a write that changes nothing a cache keeps writes no version; a payload that does not fit its kind is skipped', async () => {
  const c = deaf();
  const w = await writeEach('same');
  await c.sync();
  const v = Number(await pg.sql('SELECT max(version) FROM changes'));
  assert.not.ok(await names.claim(w.slug, 'srv-other'), 'the slug is taken');
  assert.not.ok(await shared.claimDomain({ domain: w.domain, serverId: 'srv-other', accountId: 'acct-x', state: 'active' }), 'the domain is taken');
  await shared.recordKey({
    serverId: w.id,
    fingerprint: c.keys.byFingerprint(w.fingerprint)[0].fingerprint,
    publicKey: c.keys.byFingerprint(w.fingerprint)[0].publicKey,
  });
  assert.ok(await accounts.attachPhone(w.acct.id, '+15550100'), 'an account column no cache keeps');
  await pg.sql(`UPDATE placements SET lost_at = now() WHERE server_id = '${w.id}'`);
  assert.is(Number(await pg.sql('SELECT max(version) FROM changes')), v, 'no version written');

  // a row no rootbox writes: skipped (logged), the cache goes on past it
  await pg.sql(`INSERT INTO changes (kind, key, version, payload) VALUES ('placement', 'srv-bad', nextval('change_version_seq'), '{"host": 1}')`);
  await pg.sql(`INSERT INTO changes (kind, key, version, payload) VALUES ('later', 'x', nextval('change_version_seq'), '{}')`);
  const next = await writeEach('after');
  await c.sync();
  assert.is(c.byServer('srv-bad'), undefined);
  assert.equal(known(c, next), all(true));
  assert.is(c.version, Number(await pg.sql('SELECT max(version) FROM changes')));
});

type PlanNode = { 'Relation Name'?: string; 'Actual Rows': number; 'Actual Loops': number; 'Rows Removed by Filter'?: number; Plans?: PlanNode[] };
/** The rows of `changes` a plan read: those its scans returned and those they filtered out. */
const rowsRead = (n: PlanNode): number =>
  (n['Relation Name'] === 'changes' ? (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'] : 0) +
  (n.Plans ?? []).reduce((sum, child) => sum + rowsRead(child), 0);

test('a full load reads no tombstone, however many placement tombstones are kept (the wake fence keeps them)', async () => {
  const p = pool();
  const live = Number(await pg.sql('SELECT count(*) FROM changes WHERE payload IS NOT NULL'));
  await pg.sql(
    `INSERT INTO changes (kind, key, version, payload) SELECT 'placement', 'srv-gone-' || g, nextval('change_version_seq'), NULL FROM generate_series(1, 20000) g`,
  );
  const w = await writeEach('late'); // live records above the tombstones too
  await pg.sql('ANALYZE changes');
  const explain = await p.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${CATCH_UP}`, [0, NO_TOMBSTONES]);
  const read = rowsRead(explain.rows[0]['QUERY PLAN'][0].Plan);
  assert.ok(read <= live + 5 + 2, `a full load read ${read} rows of changes for ${live + 5} live records (20000 tombstones)`);
  // and it is still the whole truth: a new cache loads every live record, and no tombstone
  const c = deaf();
  await c.sync();
  assert.equal(known(c, w), all(true));
  assert.is(c.byServer('srv-gone-1'), undefined);
  // a catch-up still brings a tombstone above what a cache saw
  await names.remove(w.id);
  await c.sync();
  assert.is(c.byServer(w.id), undefined);
  assert.is(c.reloads, 0);
  await pg.sql(`DELETE FROM changes WHERE key LIKE 'srv-gone-%'`);
});

test.run();
