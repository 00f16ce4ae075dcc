import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/index.js';
import { migrations } from '../../src/store/migrations.js';
import { openEnv } from '../../src/store/db.js';

const dirs: string[] = [];
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-store-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

test('every acknowledged write survives a SIGKILL in the middle of a write stream', async () => {
  const dir = fresh();
  const child = spawn(process.execPath, ['--import', 'tsx', new URL('../fixtures/store-writer.ts', import.meta.url).pathname, dir], {
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
  try {
    openEnv(dir, [...migrations, { version: 2, description: 'broken', up: (env) => { env.db('meta').putSync('half', 1); throw new Error('boom'); } }]);
    assert.unreachable();
  } catch (e) {
    assert.match((e as Error).message, /boom/);
  }
  const env = openEnv(dir, migrations);
  assert.is(env.db<number>('meta').get('schemaVersion'), 1);
  assert.is(env.db('meta').get('half'), undefined);
  await env.close();
});

test('server records keep their slug and key indexes consistent', async () => {
  const store = openStore(fresh());
  try {
    const rec = { id: 'srv_a', accountId: 'acc_1', slug: 'alpha', sshPublicKey: 'ssh-ed25519 AAAA', keyFingerprint: 'fpA', memoryBytes: 1, diskBytes: 1, neverSleep: false, suspended: false, flag: null, createdAt: 1 };
    assert.ok(store.servers.insert(rec));
    assert.not.ok(store.servers.insert({ ...rec, id: 'srv_b', keyFingerprint: 'fpB' }), 'slug taken');
    assert.is(store.servers.get('srv_b'), undefined);
    assert.is(store.servers.bySlug('alpha')?.id, 'srv_a');
    assert.is(store.servers.byKeyFingerprint('fpA')?.id, 'srv_a');
    assert.equal(store.servers.listByAccount('acc_1').map((s) => s.id), ['srv_a']);
    store.servers.remove('srv_a');
    assert.is(store.servers.bySlug('alpha'), undefined);
    assert.is(store.servers.byKeyFingerprint('fpA'), undefined);
    assert.equal(store.servers.listByAccount('acc_1'), []);
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

test.run();
