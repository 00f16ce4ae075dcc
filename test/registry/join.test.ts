// An existing box joins a cluster with everything it has (issue 36 item 1): a single box (LMDB
// only) with two accounts — one with a balance, usage and a custom domain whose certificate
// Pebble issued — their servers and keys, switched to a real PostgreSQL registry. Its join is
// killed (-9, at seeded steps, twice: between statements and inside a transaction before its
// commit), then the box starts as host A of the cluster beside host B: the join resumes and
// completes, and every key, balance, usage ledger, server and the domain work through both hosts,
// each record once in the registry, the ledger sums what they were. A box whose records another
// host holds is refused, every one named, nothing written. (Before the join existed, the box's
// keys answered 401 invalid_api_key on both hosts while its servers kept running.)
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { createLogger } from '../../src/log/index.js';
import { joinRegistry, RegistryPool, type BoxRecords } from '../../src/registry/index.js';
import { openStore } from '../../src/store/index.js';
import { send } from '../http/contract.js';
import { nodeArgs } from '../helpers/bundle.js';
import { TEST_CLUSTER_TOKEN, testKeys } from '../helpers/cluster.js';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { loadConfig } from '../../src/config/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startNamed, type NamedServer } from '../helpers/named.js';
import { startPebble, type PebbleServer } from '../helpers/pebble.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/wait.js';
import { get } from './fixtures/clients.js';
import { startClusterRegistry } from './fixtures/twohosts.js';

const DOMAIN = 'rbx.customer.test';
const NAME = 'www.customer.test';
const HOUR = 3_600_000;
const SEED = 36_1;
const FIXTURE = new URL('./fixtures/join-child.ts', import.meta.url).pathname;
let pg: TestPostgres;
let named: NamedServer;
let pebble: PebbleServer;
let root: string;
let httpA = 0;
const dataDir = mkdtempSync(join(tmpdir(), 'rbx-join-'));
let box: TestDaemon | undefined;
let a: TestDaemon | undefined;
let b: TestDaemon | undefined;
/** The two accounts as the single box had them: key, server, slug, balance, ledger. */
const accounts: { key: string; id: string; server: string; slug: string; balance: number; entries: number; sum: number }[] = [];

const opts = (http: number, cluster?: { host: string; listen: number }) => ({
  domain: DOMAIN,
  publicIp: '127.0.0.1',
  http: { host: '127.0.0.1', port: http },
  https: {
    host: '127.0.0.1',
    port: 0,
    acme: {
      directory: pebble.directory,
      caFile: pebble.caFile,
      retryAfter: '1s',
      dns: {
        provider: 'rfc2136',
        propagationTimeout: '20s',
        rfc2136: { server: named.server, zone: 'customer.test', keyName: named.keyName, keySecret: named.keySecret },
      },
    },
  },
  ...(cluster && {
    cluster: {
      registry: pg.url,
      host: cluster.host,
      listen: `127.0.0.1:${cluster.listen}`,
      advertise: `127.0.0.1:${cluster.listen}`,
      lease: '3s',
      connectTimeout: '500ms',
    },
  }),
  hosting: {
    rateLimit: { perIpPerMinute: 5000, createsPerIpPerHour: 200 },
    domains: { resolver: named.server, checkInterval: '300ms', limits: { paid: 3 } },
  },
});
let creates = 0;
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}) =>
  send(d.http, `api.${DOMAIN}`, method, path, {
    body: o.body,
    headers: o.key ? { authorization: `Bearer ${o.key}` } : {},
    from: method === 'POST' ? `127.0.9.${++creates}` : undefined,
  });

/** The box's runtime names (bridge, subnet, nft table, uids): host A is the same box. */
let names: Record<string, unknown> = {};
/** Whether the box's containers were left running for A (a daemon's stop keeps them). */
let left = false;

test.before(async () => {
  pg = await startClusterRegistry();
  named = await startNamed({ zones: ['customer.test'] });
  httpA = await freePort(); // Pebble validates HTTP-01 on the box's plain listener (host A's after the join)
  pebble = await startPebble({ dnsServer: named.server, httpPort: httpA });
  root = await pebble.issuingRoot();
});
test.after(async () => {
  for (const d of [b, a, box]) await d?.stop().catch(() => {});
  // A never started: the box's containers and network go with a single box's stop on its data dir
  if (left && !a) await (await startTestDaemon({ ...opts(httpA), dataDir, runtime: names })).stop().catch(() => {});
  await pebble?.stop();
  await named?.stop();
  await pg?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

test('a single box: two accounts, their servers and keys, a balance, usage and a custom domain with its certificate', async () => {
  box = await startTestDaemon({ ...opts(httpA), dataDir });
  assert.is(box.daemon.registry, undefined, 'a single box');
  for (const slug of ['shop', 'blog']) {
    const made = await api(box, 'POST', '/create', { body: { subdomains: [slug] } });
    assert.is(made.status, 200, made.text);
    const www = join(box.daemon.runtime.get(made.json.id)!.rootfs, 'root', 'www');
    mkdirSync(www, { recursive: true });
    writeFileSync(join(www, 'hi.txt'), `${slug} of the box\n`); // served without a wake
    const id = box.daemon.store.servers.get(made.json.id)!.accountId;
    accounts.push({ key: made.json.api_key, id, server: made.json.id, slug, balance: 0, entries: 0, sum: 0 });
  }
  const [one] = accounts;
  assert.ok(await box.daemon.billing.credit(one.id, 5, 'test:join-credit'));
  const add = await api(box, 'POST', `/servers/${one.server}/domains`, { key: one.key, body: { domain: NAME } });
  assert.is(add.status, 200, add.text);
  await named.add(`shop.${DOMAIN}`, 'A', '127.0.0.1');
  await named.add(NAME, 'CNAME', `shop.${DOMAIN}.`);
  await named.add(`_rootbox.${NAME}`, 'TXT', add.json.records.find((r: { type: string }) => r.type === 'TXT').value);
  await until(
    'the domain is active on the box',
    async () => ((await api(box!, 'GET', `/servers/${one.server}/domains`, { key: one.key })).json.domains[0]?.state === 'active' ? true : undefined),
    60_000,
    100,
  );
  assert.is((await get(box, NAME, '/hi.txt', { tls: true, ca: root })).body.toString(), 'shop of the box\n', 'the domain answers over HTTPS on the box');
  // two metered hours of both servers: usage entries in the box's ledger
  const t = Date.now();
  for (const h of [1, 2, 3]) await box.daemon.billing.tick(t + h * HOUR);
  for (const x of accounts) {
    const items = box.daemon.store.billing.entries(x.id, 1000).items;
    x.entries = items.length;
    x.sum = items.reduce((s, e) => s + (e.kind === 'credit' ? e.usd : -e.usd), 0);
    x.balance = box.daemon.store.accounts.get(x.id)!.balanceUsd;
    assert.ok(Math.abs(x.sum - x.balance) < 1e-9, `${x.id}: the box's ledger sums to its balance`);
    assert.ok(
      items.some((e) => e.kind === 'usage'),
      `${x.id} has usage entries`,
    );
  }
  assert.ok(accounts[0].balance > 0 && accounts[0].balance < 5, `balance ${accounts[0].balance}`);
  assert.ok(box.daemon.store.certificates.load(NAME), 'the certificate is in the box');
  // an x402 payment the box took (the paywall's lock): no host of the cluster takes it again
  const paid = { asset: '0xAsset', payer: '0xPayer', nonce: '0x01' };
  const at = Date.now();
  assert.ok(
    box.daemon.store.payments.lock({
      ...paid,
      purpose: 'verify',
      amount: '1000',
      network: 'base',
      payTo: '0xTo',
      resource: '/verify',
      validBefore: 0,
      lockedAt: at,
    }),
  );
  const { imageDir, bridge, subnet, nftTable, uidStart, uidRanges, stopGrace } = box.cfg.runtime;
  names = { imageDir, bridge, subnet, nftTable, uidStart, uidRanges, stopGrace };
  await box.daemon.stop(); // its servers keep running; its data dir stays
  left = true;
  box = undefined;
});

/** Runs the join alone in a child process killed with -9 at step `killAt`; answers the steps it reached. */
async function killedJoin(killAt: number): Promise<string[]> {
  const child = spawn(process.execPath, [...(await nodeArgs(FIXTURE)), dataDir, pg.url, 'host-a', String(killAt)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c) => (out += c));
  child.stderr.on('data', (c) => (err += c));
  const signal = await new Promise<NodeJS.Signals | null>((r) => child.once('exit', (_code, s) => r(s)));
  assert.is(signal, 'SIGKILL', `the join was killed (stdout: ${out}; stderr: ${err.slice(0, 800)})`);
  return out.trim().split('\n');
}

test('the join killed -9 twice at seeded steps leaves the box unjoined; its start in cluster mode resumes and completes it', async () => {
  const r = rng(SEED);
  // steps: each account committing (inside its transaction), committed; the domain; each certificate
  const first = 1 + 2 * Math.floor(r() * 2); // inside the first or second account's transaction
  const second = 2 + Math.floor(r() * 3); // after a commit, or inside a transaction again
  console.log(`   (seed ${SEED}: killed at steps ${first} and ${second})`);
  const one = await killedJoin(first);
  assert.is(one.length, first);
  const cut = /^account (\S+) committing$/.exec(one[first - 1])![1];
  assert.is(await pg.sql(`SELECT count(*) FROM accounts WHERE id = '${cut}'`), '0', 'the transaction killed before its commit left nothing');
  const two = await killedJoin(second);
  assert.is(two.length, second);
  const store = openStore(dataDir);
  assert.is(store.joined.get(), undefined, 'no mark before the registry has everything');
  await store.close();
  const copied = Number(await pg.sql('SELECT count(*) FROM accounts'));
  assert.ok(copied >= 1 && copied <= 2, `${copied} accounts copied before the kills`);

  a = await startTestDaemon({ ...opts(httpA, { host: 'host-a', listen: await freePort() }), dataDir, runtime: names });
  b = await startTestDaemon(opts(0, { host: 'host-b', listen: await freePort() }));
  const done = a.logs.find((l) => l.msg === 'joined the cluster: this box’s records are in the registry');
  assert.ok(done, 'A joined at its start');
  assert.ok(a.daemon.store.joined.get(), 'the mark is written');
  assert.is(await pg.sql('SELECT count(*) FROM accounts'), '2', 'each account once');
  assert.is(await pg.sql(`SELECT count(*) FROM custom_domains WHERE domain = '${NAME}'`), '1');
  assert.is(
    await pg.sql(`SELECT host || ' ' || state FROM payment_locks WHERE key = '0xasset:0xpayer:0x01'`),
    'host-a used',
    'the payment is locked for the cluster',
  );
  assert.is(await pg.sql(`SELECT count(*) FROM certificates WHERE id = '${NAME}' AND NOT removed`), '1');
  for (const x of accounts) {
    assert.is(Number(await pg.sql(`SELECT count(*) FROM ledger_entries WHERE account_id = '${x.id}'`)), x.entries, `${x.id}: each entry once`);
    const sum = Number(await pg.sql(`SELECT sum(CASE kind WHEN 'credit' THEN usd ELSE -usd END) FROM ledger_entries WHERE account_id = '${x.id}'`));
    assert.ok(Math.abs(sum - x.sum) < 1e-9, `${x.id}: the ledger sums ${sum}, the box's summed ${x.sum}`);
    const money = Number(await pg.sql(`SELECT balance_usd FROM account_money WHERE account_id = '${x.id}'`));
    assert.ok(Math.abs(money - x.balance) < 1e-9, `${x.id}: balance ${money} in the registry, ${x.balance} on the box`);
  }
});

test('every key, balance, usage ledger, server and the domain work through both hosts', async () => {
  for (const d of [a!, b!])
    for (const x of accounts) {
      const credits = await api(d, 'GET', '/credits', { key: x.key });
      assert.is(credits.status, 200, `${d === a ? 'A' : 'B'}: ${credits.text}`);
      assert.is(credits.json.balance_usd, Math.round(x.balance * 1e4) / 1e4, `${x.id}'s balance`);
      const usage = await api(d, 'GET', '/usage?limit=500', { key: x.key });
      assert.is(usage.status, 200, usage.text);
      assert.is(usage.json.entries.length, x.entries, `${x.id}'s ledger`);
      const srv = await api(d, 'GET', `/servers/${x.server}`, { key: x.key });
      assert.is(srv.status, 200, srv.text);
      const site = await get(d, `${x.slug}.${DOMAIN}`, '/hi.txt');
      assert.is(site.status, 200, `${x.slug} through ${d === a ? 'A' : 'B'}: ${site.body.toString().slice(0, 300)}`);
      assert.is(site.body.toString(), `${x.slug} of the box\n`);
    }
  for (const d of [a!, b!]) {
    const r = await until(`the domain through ${d === a ? 'A' : 'B'}`, async () => {
      const x = await get(d, NAME, '/hi.txt', { tls: true, ca: root }).catch(() => undefined);
      return x?.status === 200 ? x : undefined;
    });
    assert.is(r.body.toString(), 'shop of the box\n');
  }
  assert.is(b!.daemon.runtime.list().length, 0, 'the servers run on A only');
});

/** The box's records as A's store has them, with no mark (the join run again over what it copied). */
const unmarked = (records: BoxRecords): BoxRecords => ({ ...records, joined: () => undefined, markJoined: () => {} });

test('a join run again finds every record identical and writes nothing', async () => {
  const { boxRecords } = await import('../../src/hosting/index.js');
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  try {
    const before = await pg.sql('SELECT count(*) FROM ledger_entries');
    const money = await pg.sql("SELECT string_agg(balance_usd::text, ',' ORDER BY account_id) FROM account_money");
    const r = await joinRegistry({
      pool,
      host: 'host-a',
      keys: testKeys(),
      box: unmarked(boxRecords(a!.daemon.store, dataDir)),
      log: createLogger({ level: 'error' }),
    });
    assert.is(r.entries, 0);
    assert.is(await pg.sql('SELECT count(*) FROM ledger_entries'), before);
    assert.is(await pg.sql("SELECT string_agg(balance_usd::text, ',' ORDER BY account_id) FROM account_money"), money);
    const again = await joinRegistry({
      pool,
      host: 'host-a',
      keys: testKeys(),
      box: boxRecords(a!.daemon.store, dataDir),
      log: createLogger({ level: 'error' }),
    });
    assert.ok(again.already, 'a joined box does not join again');
  } finally {
    await pool.end();
  }
});

test("a box whose key, phone, subdomain, domain or credit another host's records hold is refused, each named, nothing written", async () => {
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  const mine = await pool.query<{ key_hash: string }>('SELECT key_hash FROM accounts WHERE id = $1', [accounts[0].id]);
  await pg.sql(`UPDATE accounts SET phone = '+15550100' WHERE id = '${accounts[1].id}'`);
  const other: BoxRecords = {
    accounts: () => [
      { id: 'acc_other1', keyHash: mine.rows[0].key_hash, keyEnc: '', phone: null, createdIp: '192.0.2.1', createdAt: 1 },
      { id: 'acc_other2', keyHash: 'f'.repeat(64), keyEnc: '', phone: '+15550100', createdIp: '192.0.2.1', createdAt: 2 },
    ],
    ledger: (id) =>
      id === 'acc_other2'
        ? [{ kind: 'credit', accountId: id, from: 1, to: 1, ramGbHours: 0, diskGbMonths: 0, egressGb: 0, usd: 1, source: 'test:join-credit' }]
        : [],
    domains: () => [{ domain: NAME, serverId: 'srv_other', accountId: 'acc_other1', state: 'active' }],
    certificates: () => [],
    servers: () => [{ id: 'srv_other', slug: 'shop', accountId: 'acc_other1' }],
    payments: () => [],
    reseal: (k) => k,
    joined: () => undefined,
    markJoined: () => assert.unreachable('no mark'),
  };
  try {
    const counts = "SELECT concat_ws(' ', (SELECT count(*) FROM accounts), (SELECT count(*) FROM ledger_entries), (SELECT count(*) FROM custom_domains))";
    const before = await pg.sql(counts);
    const err = await joinRegistry({ pool, host: 'host-c', keys: testKeys(), box: other, log: createLogger({ level: 'error' }) }).then(
      () => assert.unreachable('refused'),
      (e: unknown) => e,
    );
    assert.ok(isAppError(err) && err.code === 'join_conflict', String(err));
    const msg = (err as Error & { detail: string }).detail;
    for (const name of [
      `key of account acc_other1 is account ${accounts[0].id}'s`,
      'phone +15550100',
      'subdomain shop',
      `domain ${NAME}`,
      'credit test:join-credit',
    ])
      assert.match(msg, name);
    assert.is(await pg.sql(counts), before, 'nothing written');
  } finally {
    await pool.end();
  }
});

test('`rootbox cluster join` joins a box once and says so the second time', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-join-cli-'));
  try {
    const cfg = loadConfig({ env: {}, file: undefined, overrides: { dataDir: dir, cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN, host: 'host-c' } } });
    const out: string[] = [];
    const io = { out: (t: string) => out.push(t), err: (t: string) => out.push(t) };
    assert.is(await clusterCommand(cfg, 'join', {}, io), 0, out.join('\n'));
    assert.match(out.pop()!, `joined the registry`);
    assert.is(await clusterCommand(cfg, 'join', {}, io), 0, out.join('\n'));
    assert.match(out.pop()!, 'joined the cluster before (as host-c)');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
