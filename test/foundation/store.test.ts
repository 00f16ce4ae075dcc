import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore, paymentKey } from '../../src/store/index.js';
import { migrations } from '../../src/store/migrations.js';
import { openEnv } from '../../src/store/db.js';
import { nodeArgs } from '../helpers/bundle.js';

const dirs: string[] = [];
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-store-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

test('every acknowledged write survives a SIGKILL in the middle of a write stream', async () => {
  const dir = fresh();
  const child = spawn(process.execPath, [...(await nodeArgs(new URL('../fixtures/store-writer.ts', import.meta.url).pathname)), dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const acked: string[] = [];
  let buf = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('writer too slow')), 60_000);
    child.stdout.on('data', (d) => {
      buf += d;
      const lines = buf.split('\n');
      buf = lines.pop()!;
      acked.push(...lines);
      if (acked.length >= 300) {
        child.kill('SIGKILL');
        clearTimeout(timer);
        resolve();
      }
    });
  });
  await new Promise((r) => child.on('close', r));
  const store = openStore(dir);
  try {
    for (const id of acked) assert.ok(store.feedback.get(id), `acknowledged write ${id} was lost`);
    assert.ok(store.feedback.count() >= acked.length);
  } finally {
    await store.close();
  }
});

test('opening a store runs migrations and records the schema version', async () => {
  const dir = fresh();
  const store = openStore(dir);
  assert.is(store.schemaVersion, Math.max(...migrations.map((m) => m.version)));
  await store.close();
});

test('a store written by a newer schema is refused with a clear message', async () => {
  const dir = fresh();
  const env = openEnv(dir, [...migrations, { version: 999, description: 'future', up() {} }]);
  await env.close();
  try {
    openStore(dir);
    assert.unreachable('should refuse');
  } catch (e) {
    assert.match((e as Error).message, /schema version 999, newer than this daemon understands/);
  }
});

test('a migration and its version bump commit together or not at all', async () => {
  const dir = fresh();
  const latest = Math.max(...migrations.map((m) => m.version));
  try {
    openEnv(dir, [
      ...migrations,
      {
        version: latest + 1,
        description: 'broken',
        up: (env) => {
          env.db('meta').putSync('half', 1);
          throw new Error('boom');
        },
      },
    ]);
    assert.unreachable();
  } catch (e) {
    assert.match((e as Error).message, /boom/);
  }
  const env = openEnv(dir, migrations);
  assert.is(env.db<number>('meta').get('schemaVersion'), latest);
  assert.is(env.db('meta').get('half'), undefined);
  await env.close();
});

test('server records keep their slug and key indexes consistent', async () => {
  const store = openStore(fresh());
  try {
    const rec = {
      id: 'srv_a',
      accountId: 'acc_1',
      slug: 'alpha',
      sshPublicKey: 'ssh-ed25519 AAAA',
      keyFingerprint: 'fpA',
      memoryBytes: 1,
      diskBytes: 1,
      neverSleep: false,
      suspended: false,
      flag: null,
      createdAt: 1,
    };
    assert.ok(store.servers.insert(rec));
    assert.not.ok(store.servers.insert({ ...rec, id: 'srv_b', keyFingerprint: 'fpB' }), 'slug taken');
    assert.is(store.servers.get('srv_b'), undefined);
    assert.is(store.servers.bySlug('alpha')?.id, 'srv_a');
    assert.is(store.servers.byKeyFingerprint('fpA')?.id, 'srv_a');
    assert.equal(
      store.servers.listByAccount('acc_1').map((s) => s.id),
      ['srv_a'],
    );
    store.servers.remove('srv_a');
    assert.is(store.servers.bySlug('alpha'), undefined);
    assert.is(store.servers.byKeyFingerprint('fpA'), undefined);
    assert.equal(store.servers.listByAccount('acc_1'), []);
  } finally {
    await store.close();
  }
});

test('a store whose runtime records hold slug, memory and disk (schema 1) opens with them dropped; addresses, uid ranges and server records stay', async () => {
  const dir = fresh();
  const rec = {
    id: 'srv_old',
    accountId: 'acc_1',
    slug: 'oldie',
    sshPublicKey: 'ssh-ed25519 AAAA',
    keyFingerprint: 'fpO',
    memoryBytes: 268435456,
    diskBytes: 268435456,
    neverSleep: false,
    suspended: false,
    flag: null,
    createdAt: 5,
  };
  const v1 = openEnv(
    dir,
    migrations.filter((m) => m.version <= 1),
  );
  v1.txSync(() => {
    v1.db('rt_servers').putSync('srv_old', {
      id: 'srv_old',
      slug: 'oldie',
      ip: '10.88.0.2',
      uidBase: 1_000_000_000,
      memoryBytes: 268435456,
      diskBytes: 268435456,
      desired: 'stopped',
      createdAt: 5,
    });
    v1.db('rt_ips').putSync('10.88.0.2', 'srv_old');
    v1.db('rt_uids').putSync(1_000_000_000, 'srv_old');
    v1.db('servers').putSync('srv_old', rec);
    v1.db('server_slugs').putSync('oldie', 'srv_old');
  });
  await v1.close();
  const store = openStore(dir);
  try {
    assert.is(store.schemaVersion, Math.max(...migrations.map((m) => m.version)));
    assert.equal(store.runtime.get('srv_old'), { id: 'srv_old', ip: '10.88.0.2', uidBase: 1_000_000_000, desired: 'stopped', createdAt: 5 });
    assert.equal(store.runtime.allocations(), { ips: [['10.88.0.2', 'srv_old']], uids: [[1_000_000_000, 'srv_old']] });
    const next = store.runtime.allocate(
      { id: 'srv_new', desired: 'running', createdAt: 6 },
      { uidStart: 1_000_000_000, uidRanges: 2, ips: () => ['10.88.0.2', '10.88.0.3'] },
    );
    assert.equal(
      next,
      { id: 'srv_new', desired: 'running', createdAt: 6, ip: '10.88.0.3', uidBase: 1_000_000_000 + 65536 },
      'the old server keeps its address and uid range',
    );
    assert.equal(store.servers.bySlug('oldie'), rec, 'the server record, limits included, is as it was');
  } finally {
    await store.close();
  }
});

test('each database of the store is opened by one area module (so balances are written by the account store alone)', () => {
  const dir = new URL('../../src/store/', import.meta.url).pathname;
  const owners = new Map<string, string[]>();
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.ts') && !['migrations.ts', 'db.ts', 'index.ts', 'backup.ts'].includes(n))) {
    for (const m of readFileSync(join(dir, f), 'utf8').matchAll(/\.db<[^>]*>\('([a-z_]+)'\)/g)) owners.set(m[1], [...(owners.get(m[1]) ?? []), f]);
  }
  assert.ok(owners.size >= 20, `found ${owners.size} databases`);
  for (const [name, files] of owners) assert.equal(files, [files[0]], `${name} is opened by ${files.join(' and ')}`);
  assert.equal(owners.get('accounts'), ['accounts.ts']);
});

test('a charge takes from the balance and a credit adds to it, each with its ledger entry, once', async () => {
  const store = openStore(fresh());
  try {
    store.accounts.insert({ id: 'acc_b', keyHash: 'h', keyEnc: 'x', phone: null, createdIp: '1.2.3.4', createdAt: 0, balanceUsd: 0 });
    const prices = { ramUsdPerGbHour: 1, diskUsdPerGbMonth: 0, egressUsdPerGb: 0 };
    const noGrant = () => ({ ramGbHours: 0, egressGb: 0 });
    assert.ok(store.billing.credit('acc_b', 5, 'admin:one', 10));
    assert.not.ok(store.billing.credit('acc_b', 5, 'admin:one', 11), 'a source is credited once');
    assert.not.ok(store.billing.credit('acc_none', 5, 'admin:two', 11), 'no account, no credit');
    store.billing.startMeter('srv_b', 100, 0);
    assert.ok(
      store.billing.charge({ accountId: 'acc_b', serverId: 'srv_b', from: 100, to: 200, ramGbHours: 1.5, diskGbMonths: 0, egressGb: 0 }, 0, prices, noGrant),
    );
    assert.not.ok(
      store.billing.charge({ accountId: 'acc_b', serverId: 'srv_b', from: 100, to: 200, ramGbHours: 1.5, diskGbMonths: 0, egressGb: 0 }, 0, prices, noGrant),
      'a period is charged once',
    );
    assert.is(store.accounts.get('acc_b')?.balanceUsd, 3.5);
    assert.equal(
      store.billing.entries('acc_b', 10).items.map((e) => [e.kind, e.usd]),
      [
        ['usage', 1.5],
        ['credit', 5],
      ],
    );
  } finally {
    await store.close();
  }
});

test('stats counters persist across reopen', async () => {
  const dir = fresh();
  let store = openStore(dir);
  store.stats.increment('route:GET /x:200', 2);
  store.stats.increment('route:GET /x:200');
  assert.is(store.stats.read('route:')['route:GET /x:200'], 3);
  await store.close();
  store = openStore(dir);
  assert.is(store.stats.read('route:')['route:GET /x:200'], 3);
  await store.close();
});

test('stats counters stay readable while their flush is being committed', async () => {
  const store = openStore(fresh());
  store.stats.increment('t|a', 3);
  const flushing = store.stats.flush();
  assert.is(store.stats.read('t|')['t|a'], 3, 'counted while the commit is under way');
  await flushing;
  assert.is(store.stats.read('t|')['t|a'], 3, 'counted once after it');
  store.stats.increment('t|a', 2);
  assert.is(store.stats.read('t|')['t|a'], 5);
  await store.close();
});

test('a pending payment stays visible to the reconciler while its change is being committed', async () => {
  const store = openStore(fresh());
  const p = store.payments;
  const base = { asset: '0xA', payer: '0xB', purpose: 'verify', amount: '1', network: 'n', payTo: '0xC', resource: 'r', validBefore: 9e9, lockedAt: 1 };
  let misses = 0;
  let polls = 0;
  /** Reads between the transaction's callback and its commit (lmdb's readers see the old record there). */
  const watch = async (writing: Promise<unknown>, nonce: string) => {
    let done = false;
    void writing.then(() => (done = true));
    while (!done) {
      polls++;
      if (!p.pending().some((r) => r.nonce === nonce) || p.get(paymentKey(base.asset, base.payer, nonce))?.status !== 'pending') misses++;
      await new Promise((r) => setImmediate(r));
    }
  };
  for (let i = 0; i < 40; i++) {
    const nonce = `0x${i}`;
    const key = paymentKey(base.asset, base.payer, nonce);
    assert.ok(p.lock({ ...base, nonce }));
    await watch(p.markSettling(key, { status: 'pending', reason: 'settling' }), nonce);
    await watch(p.updateLater(key, { status: 'pending', reason: 'outcome unknown' }), nonce);
    await watch(p.updateDurable(key, { transaction: '0xT' }), nonce);
  }
  assert.ok(polls > 40, `polls ${polls}`);
  assert.is(misses, 0, `${misses} of ${polls} reads missed the pending payment`);
  await store.close();
});

test.run();
