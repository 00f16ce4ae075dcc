// The join's writes against a real PostgreSQL registry, with a box's records made by hand
// (registry/join.ts): a box returning from single-box mode with an account whose key was rotated
// and whose phone was proven meanwhile joins with them (the box's key a rotation, the registry's
// revoked), while a copy the registry revoked keeps the registry's key; the account's row is
// written last in its transaction, so the cluster-wide feed lock is not held through its ledger
// batches; certificates the registry has (fresher, or removed) stay as they are and expired ones
// are not copied.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createLogger } from '../../src/log/index.js';
import { joinRegistry, RegistryPool, type BoxAccount, type BoxLedgerEntry, type BoxRecords } from '../../src/registry/index.js';
import { testKeys } from '../helpers/cluster.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { startClusterRegistry } from './fixtures/twohosts.js';

/** feed.ts FEED_LOCK ('plac'): the advisory lock every followed table's trigger takes until commit. */
const FEED_LOCK = 0x706c6163;
const NOW = 1_900_000_000_000;
let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startClusterRegistry();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 20_000 });
});
test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

const account = (id: string, keyHash: string, phone: string | null = null): BoxAccount => ({
  id,
  keyHash,
  keyEnc: `sealed:${keyHash}`,
  phone,
  createdIp: '192.0.2.9',
  createdAt: 1000,
});

function box(o: Partial<BoxRecords>): BoxRecords {
  return {
    accounts: () => [],
    ledger: () => [],
    domains: () => [],
    certificates: () => [],
    servers: () => [],
    payments: () => [],
    reseal: (k) => k,
    joined: () => undefined,
    markJoined: () => {},
    ...o,
  };
}

const join = (host: string, records: BoxRecords) =>
  joinRegistry({ pool, host, keys: testKeys(), box: records, log: createLogger({ level: 'error' }), now: () => NOW });

test('a box back from single-box mode: its rotated key replaces the registry’s (revoked), its new phone is set; a revoked copy keeps the registry’s key', async () => {
  const old = 'a'.repeat(64);
  const rotated = 'b'.repeat(64);
  await pg.sql(
    `INSERT INTO accounts (id, key_hash, key_enc, phone, created_ip, created_at, host) VALUES ('acc_back', '${old}', 'sealed:old', NULL, '192.0.2.9', 1000, 'host-a')`,
  );
  // another account: a host rotated its key in the cluster; the box kept the old one
  const newer = 'c'.repeat(64);
  const stale = 'd'.repeat(64);
  await pg.sql(
    `INSERT INTO accounts (id, key_hash, key_enc, phone, created_ip, created_at, host) VALUES ('acc_kept', '${newer}', 'sealed:newer', '+15550111', '192.0.2.9', 1000, 'host-b')`,
  );
  await pg.sql(`INSERT INTO revoked_keys (key_hash, account_id) VALUES ('${stale}', 'acc_kept')`);
  const r = await join('host-a', box({ accounts: () => [account('acc_back', rotated, '+15550110'), account('acc_kept', stale)] }));
  assert.is(r.accounts, 2);
  assert.is(await pg.sql(`SELECT key_hash || ' ' || key_enc || ' ' || phone FROM accounts WHERE id = 'acc_back'`), `${rotated} sealed:${rotated} +15550110`);
  assert.is(await pg.sql(`SELECT account_id FROM revoked_keys WHERE key_hash = '${old}'`), 'acc_back', 'the registry’s key is revoked');
  assert.is(await pg.sql(`SELECT key_hash || ' ' || phone FROM accounts WHERE id = 'acc_kept'`), `${newer} +15550111`, 'a revoked copy changes nothing');
});

test('each account’s row is written last: the feed lock is free while its ledger batches are written', async () => {
  const entries: BoxLedgerEntry[] = Array.from({ length: 700 }, (_, i) => ({
    kind: 'usage',
    accountId: 'acc_long',
    serverId: 'srv_long',
    from: i * 10,
    to: i * 10 + 10,
    ramGbHours: 0.001,
    diskGbMonths: 0,
    egressGb: 0,
    usd: 0.0001,
  }));
  // another writer holds the key of the second batch's first entry, uncommitted: the join waits there
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let holding = false;
  const blocker = pool
    .tx(async (c) => {
      await c.query(
        `INSERT INTO ledger_entries (key, account_id, kind, server_id, host, period_from, period_to, ram_gb_hours, disk_gb_months, egress_gb, usd, source)
         VALUES ('host-l:srv_long:5010', 'acc_long', 'usage', 'srv_long', 'host-l', 5000, 5010, 0.001, 0, 0, 0.0001, NULL)`,
      );
      holding = true;
      await held;
      throw new Error('rolled back');
    })
    .catch(() => {});
  try {
    await until('the other writer holds the key', () => holding);
    const joining = join('host-l', box({ accounts: () => [account('acc_long', 'e'.repeat(64))], ledger: () => entries }));
    let failed: unknown;
    joining.catch((e) => (failed = e));
    await until('the join waits inside its ledger batches', async () =>
      failed === undefined ? (await pg.sql(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`)) === '1' || undefined : true,
    );
    assert.is(failed, undefined, String(failed));
    // a placement write of any host takes this lock: free while the join writes the account's ledger
    assert.is(await pg.sql(`SELECT pg_try_advisory_xact_lock(${FEED_LOCK})`), 't', 'the feed lock is free during the ledger batches');
    release();
    await blocker;
    const r = await joining;
    assert.is(r.entries, 700);
    assert.is(await pg.sql(`SELECT count(*) FROM accounts WHERE id = 'acc_long'`), '1');
  } finally {
    release();
    await blocker;
  }
});

test('certificates: one the registry has (fresher, or removed) stays as it is, an expired one is not copied, a new one is', async () => {
  const key = '-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----';
  await pg.sql(
    `INSERT INTO certificates (id, names, cert_pem, key_enc, not_after, issued_at, host, removed) VALUES
       ('fresh.test', '["fresh.test"]', 'pem:b-fresher', '\\x00', ${NOW + 80 * 86_400_000}, ${NOW - 1000}, 'host-b', false),
       ('gone.test', '["gone.test"]', 'pem:b-gone', '\\x00', ${NOW + 80 * 86_400_000}, ${NOW - 1000}, 'host-b', true)`,
  );
  const cert = (id: string, notAfter: number) => ({ id, names: [id], certPem: `pem:box-${id}`, keyPem: key, notAfter, issuedAt: NOW - 30 * 86_400_000 });
  const r = await join(
    'host-c',
    box({
      certificates: () => [
        cert('fresh.test', NOW + 60 * 86_400_000),
        cert('gone.test', NOW + 60 * 86_400_000),
        cert('old.test', NOW - 1),
        cert('new.test', NOW + 60 * 86_400_000),
      ],
    }),
  );
  assert.is(r.certificates, 1);
  assert.is(
    await pg.sql(`SELECT cert_pem || ' ' || host || ' ' || removed FROM certificates WHERE id = 'fresh.test'`),
    'pem:b-fresher host-b false',
    'not overwritten',
  );
  assert.is(await pg.sql(`SELECT cert_pem || ' ' || removed FROM certificates WHERE id = 'gone.test'`), 'pem:b-gone true', 'not resurrected');
  assert.is(await pg.sql(`SELECT count(*) FROM certificates WHERE id = 'old.test'`), '0', 'an expired one is not copied');
  assert.is(await pg.sql(`SELECT cert_pem || ' ' || host FROM certificates WHERE id = 'new.test'`), 'pem:box-new.test host-c');
});

test.run();
