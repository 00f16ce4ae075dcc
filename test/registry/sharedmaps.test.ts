// The servers' SSH keys and the HTTP-01 answers every host keeps (schema 12) against a real
// PostgreSQL: a key another host records is in this host's cache without asking, by fingerprint,
// with its server and host; a key re-recorded unchanged (a host's start) writes no new version; a
// removal takes it out (tombstone); changes made while the LISTEN connection was killed
// (pg_terminate_backend) are caught up once it is back; a cache started later loads every key
// whole; a token another host's order writes is known here until it is dropped or expires.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { migrate, PlacementCache, RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { generateServerKeyPair } from '../../src/ssh/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { testKeys } from '../helpers/cluster.js';

let pg: TestPostgres;
const pools: RegistryPool[] = [];
const caches: PlacementCache[] = [];
let here: PlacementCache;
let shared: RegistryShared;

const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 500, statementTimeoutMs: 2000 });
  pools.push(p);
  return p;
};
// no timer catch-up: only NOTIFY, a reconnect or the start brings changes
const cache = async () => {
  const c = new PlacementCache(pool(), { refreshMs: 60_000, reconnectMs: 50, connectTimeoutMs: 500 });
  caches.push(c);
  await c.start();
  return c;
};

test.before(async () => {
  pg = await startPostgres();
  await migrate(pool());
  here = await cache();
  shared = new RegistryShared(pool(), 'host-b', testKeys());
});
test.after(async () => {
  for (const c of caches) await c.stop().catch(() => {});
  for (const p of pools) await p.end();
  await pg?.stop();
});

let n = 0;
const key = () => {
  const k = generateServerKeyPair(`k${++n}`);
  return { serverId: `srv-k${n}`, fingerprint: k.fingerprint, publicKey: k.publicKey };
};

test('a key another host records is known here by fingerprint without asking; unchanged again is no new version; removed, it is gone', async () => {
  const k = key();
  await shared.recordKey(k);
  const t0 = performance.now();
  const got = await until('the key is seen', () => here.keys.byFingerprint(k.fingerprint)[0], 5000, 1);
  console.log(`    recorded on B → known here ${(performance.now() - t0).toFixed(1)} ms later`);
  assert.equal({ ...got, version: 0 }, { ...k, host: 'host-b', version: 0 });
  const v = here.version;
  await shared.recordKey(k);
  await shared.recordKeys([k]);
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE kind = 'key' AND version > ${v}`), '0', 'the same key again writes no version');
  await shared.removeKey(k.serverId);
  await until('removed', () => here.keys.byFingerprint(k.fingerprint).length === 0, 5000, 1);
  assert.is(here.keys.size, 0);
});

test('changes made while the LISTEN connection was killed are caught up when it is back; a cache started later has every key', async () => {
  const [old, kept, fresh] = [key(), key(), key()];
  await shared.recordKeys([old, kept]);
  await until('seen', () => here.keys.byFingerprint(old.fingerprint).length && here.keys.byFingerprint(kept.fingerprint).length, 5000, 1);
  const listens = here.listens;
  await pg.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`);
  await shared.removeKey(old.serverId);
  await shared.recordKey(fresh);
  await until('reconnected', () => here.listens > listens, 10_000);
  await until('caught up', () => here.keys.byFingerprint(fresh.fingerprint).length === 1 && here.keys.byFingerprint(old.fingerprint).length === 0, 5000);
  const later = await cache();
  assert.equal(
    [kept, fresh, old].map((k) => later.keys.byFingerprint(k.fingerprint).map((x) => x.serverId)),
    [[kept.serverId], [fresh.serverId], []],
  );
});

test('an HTTP-01 token another host writes is known here without asking; expired, it is not answered; dropped, it is gone', async () => {
  const [t1, t2] = [`tok1${Date.now().toString(36)}`, `tok2${Date.now().toString(36)}`];
  await shared.putChallenge(t1, `${t1}.thumb`);
  await shared.putChallenge(t2, `${t2}.thumb`);
  await until('the tokens are known', () => here.challenges.get(t1) && here.challenges.get(t2), 5000, 1);
  assert.is(here.challenges.get(t1), `${t1}.thumb`);
  await pg.sql(`UPDATE acme_challenges SET expires_at = now() - interval '1 second' WHERE token = '${t2}'`);
  await until('the expiry is seen', () => here.challenges.get(t2) === undefined, 5000, 1);
  assert.is(here.challenges.get(t1), `${t1}.thumb`);
  await shared.dropChallenge(t1); // drops the expired one too
  await until('both gone', () => here.challenges.size === 0, 5000, 1);
});

test.run();
