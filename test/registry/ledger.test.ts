// Money in the registry with a real PostgreSQL: two hosts (each its own LMDB store and its own
// pool, as two daemons have) meter one account at the same instants and the registry's ledger
// sum, balance and grant split are exact; a credit written on one host is the other's balance
// after its next pass; with the registry stopped metering goes on into each host's outbox (also
// across a restart of the host) and it is written exactly once when the registry is back; a
// recharge on a daemon in registry mode is written to the registry's ledger, and answers 503
// registry_unavailable without settling while the registry is down. The clock is injected.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callAdmin } from '../../src/admin/index.js';
import { adminCreditOffline, Billing, type UsageSample } from '../../src/billing/index.js';
import { isAppError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/index.js';
import { RegistryLedger, RegistryPool } from '../../src/registry/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { decodeHeader } from '../../src/payments/index.js';
import { call } from '../billing/api.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { LocalFacilitator } from '../payments/fixtures/facilitator.js';
import { encode, newPayer, signPayment, type Terms } from '../payments/fixtures/payer.js';
import { initRegistry } from '../helpers/cluster.js';

const GB = 1024 ** 3;
const HOUR = 3_600_000;
const T0 = 1_700_000_000_000;
const cfg = {
  ramUsdPerGbHour: 0.005,
  diskUsdPerGbMonth: 0.25,
  egressUsdPerGb: 0.05,
  grantRamGbHours: 10,
  grantEgressGb: 1,
  verifiedGrantRamGbHours: 100,
  verifiedGrantEgressGb: 10,
  meterInterval: 60_000,
  suspendAfter: 48 * HOUR,
  maxRechargeUsd: 100,
  checkpointUsdPerGbMonth: 0.1,
};

let pg: TestPostgres;
const pools: RegistryPool[] = [];
const stores: Store[] = [];
const dirs: string[] = [];

test.before(async () => {
  pg = await startPostgres();
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(p);
  await p.end();
});
test.after(async () => {
  for (const s of stores) await s.close().catch(() => undefined);
  for (const p of pools) await p.end();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  await pg?.stop();
});

/** One host: its own store (dir kept across a restart), its own pool, billing in registry mode. */
function host(name: string, dir = mkdtempSync(join(tmpdir(), 'rbx-ledger-'))) {
  if (!dirs.includes(dir)) dirs.push(dir);
  const store = openStore(dir);
  stores.push(store);
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 500, statementTimeoutMs: 2000 });
  pools.push(pool);
  const samples = new Map<string, UsageSample>();
  const billing = new Billing({
    cfg,
    store,
    log: silentLogger,
    runtime: { stop: async () => undefined, start: async () => undefined },
    usage: async (id) => samples.get(id),
    ledger: new RegistryLedger(pool, name),
  });
  return { name, dir, store, samples, billing };
}
type Host = ReturnType<typeof host>;

/** The account as the accounts area would have it on every host; a server of it on `h`. */
function holds(h: Host, account: string, server?: string) {
  if (!h.store.accounts.get(account))
    h.store.accounts.insert({ id: account, keyHash: account.padEnd(64, '0'), keyEnc: '', phone: null, createdIp: '192.0.2.1', createdAt: 0, balanceUsd: 0 });
  if (!server) return;
  h.store.servers.insert({
    id: server,
    accountId: account,
    slug: server.replace('_', '-'),
    sshPublicKey: '',
    keyFingerprint: server,
    memoryBytes: GB,
    diskBytes: GB,
    neverSleep: false,
    suspended: false,
    flag: null,
    createdAt: 0,
  });
  h.samples.set(server, { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
}

const money = async (account: string) => {
  const [balance, spent, ram, sum, n] = (
    await pg.sql(
      `SELECT m.balance_usd, m.spent_usd, m.ram_gb_hours, (SELECT sum(usd) FROM ledger_entries WHERE account_id = m.account_id AND kind = 'usage'),
              (SELECT count(*) FROM ledger_entries WHERE account_id = m.account_id AND kind = 'usage') FROM account_money m WHERE m.account_id = '${account}'`,
    )
  ).split('|');
  return { balance: Number(balance), spent: Number(spent), ram: Number(ram), sum: Number(sum), n: Number(n) };
};

test('two hosts metering one account at the same instants: the ledger sum, the balance and the grant split are exact', async () => {
  const a = host('host-a');
  const b = host('host-b');
  holds(a, 'acc_both', 'srv_on_a');
  holds(b, 'acc_both', 'srv_on_b');
  // 1 GB awake on each host for 20 hours, metered every hour by both at once: 40 GB-h, 10 of them
  // the grant, 30 paid at $0.005 → $0.15 (a grant read outside the account's lock pays less)
  for (let h = 0; h <= 20; h++) await Promise.all([a.billing.tick(T0 + h * HOUR), b.billing.tick(T0 + h * HOUR)]);
  const m = await money('acc_both');
  assert.is(m.n, 40, 'one entry per server and period');
  assert.is(m.ram, 40);
  assert.is(m.spent, 0.15);
  assert.is(m.balance, -0.15);
  assert.is(m.sum, 0.15, 'the ledger sums to what was drawn');
  assert.is(a.store.billing.pending(10).length + b.store.billing.pending(10).length, 0, 'both outboxes written');
  // the next pass (no period long enough to charge) refreshes each host's cache from the registry
  await Promise.all([a.billing.tick(T0 + 20 * HOUR + 1), b.billing.tick(T0 + 20 * HOUR + 1)]);
  for (const h of [a, b]) {
    assert.is(h.store.accounts.get('acc_both')!.balanceUsd, -0.15, `${h.name} caches the shared balance`);
    assert.is(h.store.billing.usageOf('acc_both').ramGbHours, 40);
    assert.is(h.billing.credits(h.store.accounts.get('acc_both')!).ram_gb_hours_left, 0);
  }
  const page = await a.billing.usage(a.store.accounts.get('acc_both')!, '500', null);
  assert.is(page.entries.length, 40, 'the usage page lists both hosts’ entries');
});

test('checkpoint storage costs the same in the registry’s ledger as on a single box (one formula), paid from the balance', async () => {
  const shared = host('host-ck');
  const dir = mkdtempSync(join(tmpdir(), 'rbx-ledger-'));
  dirs.push(dir);
  const single = openStore(dir);
  stores.push(single);
  const samples = new Map<string, UsageSample>();
  const local = new Billing({
    cfg,
    store: single,
    log: silentLogger,
    runtime: { stop: async () => undefined, start: async () => undefined },
    usage: async (id) => samples.get(id),
  });
  holds(shared, 'acc_ck', 'srv_ck');
  holds({ ...shared, store: single, samples }, 'acc_ck', 'srv_ck');
  for (const [store, s] of [
    [shared.store, shared.samples],
    [single, samples],
  ] as const) {
    s.set('srv_ck', { awake: true, memoryBytes: GB, diskUsedBytes: GB, egressBytes: 0 });
    await store.checkpoints.add({ id: 'ckp_1', serverId: 'srv_ck', accountId: 'acc_ck', createdAt: T0, kind: 'manual', sizeBytes: 4 * GB, newBytes: 3 * GB });
  }
  for (const t of [T0, T0 + 730 * HOUR]) await Promise.all([shared.billing.tick(t), local.tick(t)]);
  const m = await money('acc_ck');
  const [e] = (await local.usage(single.accounts.get('acc_ck')!, '10', null)).entries;
  // 730 GB-h of RAM (10 free, 720 × $0.005 = $3.6) + 1 GB-month of disk ($0.25) + 3 GB-months of checkpoints ($0.3)
  assert.is(e.checkpoint_gb_months, 3);
  assert.is(e.usd, 4.15);
  assert.is(m.sum, e.usd, 'the registry’s entry costs what the single box’s does');
  assert.is(m.balance, -4.15);
  assert.is(single.accounts.get('acc_ck')!.balanceUsd, -4.15);
  // /usage and /credits answer the same in both modes: the registry keeps the GB-months of
  // checkpoints in its entries and its totals (schema 19), as the single box does
  const page = await shared.billing.usage(shared.store.accounts.get('acc_ck')!, '10', null);
  assert.equal(page.entries, (await local.usage(single.accounts.get('acc_ck')!, '10', null)).entries, 'the registry’s /usage page is the single box’s');
  assert.is(await pg.sql(`SELECT checkpoint_gb_months FROM account_money WHERE account_id = 'acc_ck'`), '3.000000000');
  await shared.billing.tick(T0 + 730 * HOUR + 1); // the next pass refreshes the cached totals from the registry
  assert.equal(shared.store.billing.usageOf('acc_ck'), single.billing.usageOf('acc_ck'), 'the cached totals are the single box’s');
  assert.equal(
    shared.billing.credits(shared.store.accounts.get('acc_ck')!),
    local.credits(single.accounts.get('acc_ck')!),
    'the registry’s /credits is the single box’s',
  );
});

test('a credit written on host A is host B’s balance after its next pass, once per source', async () => {
  const a = host('host-a');
  const b = host('host-b');
  holds(a, 'acc_credit');
  holds(b, 'acc_credit', 'srv_credit_b');
  assert.is(await a.billing.credit('acc_credit', 5, 'admin:00000000-0000-4000-8000-000000000001'), true);
  assert.is(await b.billing.credit('acc_credit', 5, 'admin:00000000-0000-4000-8000-000000000001'), false, 'the same source on another host');
  assert.is(a.store.accounts.get('acc_credit')!.balanceUsd, 5);
  assert.is(b.store.accounts.get('acc_credit')!.balanceUsd, 5, 'B wrote nothing but cached what the registry answered');
  assert.is(await a.billing.credit('acc_credit', 2.5, 'x402:0xpayer:0x01'), true);
  await b.billing.tick(T0);
  assert.is(b.store.accounts.get('acc_credit')!.balanceUsd, 7.5);
  assert.is(b.billing.credits(b.store.accounts.get('acc_credit')!).tier, 'paid');
  assert.is(await pg.sql(`SELECT count(*) FROM ledger_entries WHERE account_id = 'acc_credit'`), '2');
});

test('registry stopped: metering goes on into the outbox, across a restart of the host, and is written exactly once when it is back', async () => {
  const a = host('host-a');
  holds(a, 'acc_out', 'srv_out');
  await a.billing.tick(T0);
  await a.billing.tick(T0 + HOUR);
  assert.is((await money('acc_out')).n, 1);
  await pg.halt();
  try {
    await a.billing.tick(T0 + 2 * HOUR);
    await a.billing.tick(T0 + 3 * HOUR);
    assert.is(a.store.billing.pending(10).length, 2, 'two periods wait');
    const refused = await a.billing.credit('acc_out', 1, 'admin:00000000-0000-4000-8000-000000000002').catch((e) => e);
    assert.ok(isAppError(refused) && refused.code === 'registry_unavailable', String(refused));
    // the host restarts while the registry is down: its outbox is on disk
    await a.store.close();
    const again = host('host-a', a.dir);
    again.samples.set('srv_out', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
    await again.billing.tick(T0 + 4 * HOUR);
    assert.is(again.store.billing.pending(10).length, 4, 'three periods and the credit wait');
    await pg.start();
    await again.billing.tick(T0 + 5 * HOUR);
    await again.billing.tick(T0 + 5 * HOUR + 1);
    assert.is(again.store.billing.pending(10).length, 0);
    const m = await money('acc_out');
    assert.is(m.n, 5, 'hours 0-5, each once');
    assert.is(m.ram, 5);
    assert.is(await pg.sql(`SELECT sum(usd) FROM ledger_entries WHERE account_id = 'acc_out' AND kind = 'credit'`), '1.000000000', 'the queued credit, once');
    assert.is(again.store.accounts.get('acc_out')!.balanceUsd, 1);
  } finally {
    await pg.start().catch(() => undefined);
  }
});

test('a credit made offline (daemon stopped) in registry mode waits in the outbox and is written once when billing starts', async () => {
  const a = host('host-a');
  holds(a, 'acc_offline', 'srv_offline');
  await a.store.close();
  const said = await adminCreditOffline(a.dir, 'acc_offline', '3', 'admin:00000000-0000-4000-8000-000000000003', true);
  assert.match(said, /queued/);
  const again = host('host-a', a.dir);
  assert.is(again.store.accounts.get('acc_offline')!.balanceUsd, 0, 'nothing written to the cached balance');
  again.billing.start();
  try {
    await until('the queued credit is written', async () => (await pg.sql(`SELECT count(*) FROM ledger_entries WHERE account_id = 'acc_offline'`)) === '1');
    await until('the cache has it', () => again.store.accounts.get('acc_offline')!.balanceUsd === 3);
  } finally {
    await again.billing.stop();
  }
  assert.is(again.store.billing.pending(10).length, 0);
});

test('a batch sent again after a lost commit reply changes nothing', async () => {
  const ledger = new RegistryLedger(pools[0], 'host-r');
  const entry = {
    kind: 'usage' as const,
    accountId: 'acc_retry',
    serverId: 'srv_retry',
    from: T0,
    to: T0 + HOUR,
    ramGbHours: 12,
    diskGbMonths: 0,
    egressGb: 0,
    grant: { ramGbHours: 10, egressGb: 1 },
    prices: { ramUsdPerGbHour: 0.5, diskUsdPerGbMonth: 0, egressUsdPerGb: 0 },
  };
  const first = await ledger.write([entry]);
  const again = await ledger.write([entry]);
  assert.equal([...first.applied], ['host-r:srv_retry:' + (T0 + HOUR)]);
  assert.equal([...again.applied], []);
  assert.equal(again.totals.get('acc_retry'), first.totals.get('acc_retry'));
  assert.is(first.totals.get('acc_retry')!.balanceUsd, -1, '2 GB-h past the grant at $0.50');
});

test('a recharge on a daemon in registry mode is credited in the registry; with the registry down it answers 503 and settles nothing', async () => {
  const fac = await new LocalFacilitator().start();
  let d: TestDaemon | undefined;
  try {
    d = await startTestDaemon({
      cluster: { registry: pg.url, host: 'host-pay', connectTimeout: '500ms', statementTimeout: '2s' },
      verify: { x402: { payTo: '0x1111111111111111111111111111111111111111', facilitatorUrl: fac.url, facilitatorTimeout: '1s', settleTimeout: '1s' } },
    });
    const created = await call(d.http, 'POST', '/create');
    assert.is(created.status, 200, JSON.stringify(created.body));
    const key = created.body.api_key as string;
    const account = d.daemon.store.servers.get(created.body.id)!.accountId;
    const pay = async () => {
      const unpaid = await call(d!.http, 'POST', '/account/recharge', { key, body: { usd: 2 } });
      assert.is(unpaid.status, 402, JSON.stringify(unpaid.body));
      const terms = (decodeHeader(unpaid.headers['payment-required'] as string, 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0];
      return encode(await signPayment(newPayer(), terms));
    };
    const paid = await call(d.http, 'POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': await pay() } });
    assert.is(paid.status, 200, JSON.stringify(paid.body));
    assert.is(paid.body.credits.balance_usd, 2);
    assert.is(await pg.sql(`SELECT balance_usd FROM account_money WHERE account_id = '${account}'`), '2.000000000');
    const shown = (await callAdmin(d.dataDir, 'GET', `/accounts/${account}`))!;
    assert.is(shown.status, 200);
    const ledger = (shown.body as { ledger: { kind: string; usd: number; source: string | null }[] }).ledger;
    assert.ok(
      ledger.some((e) => e.kind === 'credit' && e.usd === 2 && e.source?.startsWith('x402:')),
      `accounts show lists the registry's entry: ${JSON.stringify(ledger)}`,
    );
    const payment = await pay();
    await pg.halt();
    try {
      const down = await call(d.http, 'POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': payment } });
      assert.is(down.status, 503, JSON.stringify(down.body));
      assert.is(down.body.error, 'registry_unavailable');
      assert.is(fac.transfers.length, 1, 'only the first payment was settled');
      const credit = (await callAdmin(d.dataDir, 'POST', '/credit', { target: account, usd: '1', source: 'admin:00000000-0000-4000-8000-000000000004' }))!;
      assert.is(credit.status, 503, JSON.stringify(credit.body));
      assert.is((credit.body as { error: string }).error, 'registry_unavailable');
      assert.is(d.daemon.store.billing.pending(10).length, 0, 'the refused credit was not queued');
    } finally {
      await pg.start();
    }
  } finally {
    await d?.stop();
    await fac.stop();
  }
});

test('/credits counts the checkpoint bytes of the account’s servers on every host, the same figure on each', async () => {
  const a = host('host-cka');
  const b = host('host-ckb');
  holds(a, 'acc_two', 'srv_two_a');
  holds(b, 'acc_two', 'srv_two_b');
  holds(b, 'acc_two', 'srv_two_gone');
  const ckp = (s: Store, serverId: string, id: string, newBytes: number) =>
    s.checkpoints.add({ id, serverId, accountId: 'acc_two', createdAt: T0, kind: 'manual', sizeBytes: newBytes, newBytes });
  await ckp(a.store, 'srv_two_a', 'ckp_a1', 2 * GB);
  await ckp(b.store, 'srv_two_b', 'ckp_b1', GB);
  await ckp(b.store, 'srv_two_gone', 'ckp_g1', 5 * GB);
  const bytes = async (h: Host) => {
    await h.billing.book.refresh('acc_two'); // what /credits does first (core.freshCredits)
    return h.billing.credits(h.store.accounts.get('acc_two')!).checkpoint_bytes;
  };
  for (const t of [T0, T0 + HOUR]) await Promise.all([a.billing.tick(t), b.billing.tick(t)]);
  assert.is(await bytes(a), 8 * GB, 'host A counts B’s servers');
  assert.is(await bytes(b), 8 * GB, 'host B counts A’s, the same figure');
  // a checkpoint taken on B is counted on A at once (written when taken, not a pass later)
  await ckp(b.store, 'srv_two_b', 'ckp_b2', GB);
  b.billing.checkpointsChanged('srv_two_b', 'acc_two');
  await until('host A counts the checkpoint B just took', async () => (await bytes(a)) === 9 * GB, 5000);
  // a server B no longer has (its delete cut off) stops counting at B's next pass
  await b.store.checkpoints.remove('srv_two_gone', 'ckp_g1');
  b.store.servers.remove('srv_two_gone');
  await b.billing.tick(T0 + 2 * HOUR);
  assert.is(await bytes(a), 4 * GB);
  assert.is(await bytes(b), 4 * GB);
});

test.run();
