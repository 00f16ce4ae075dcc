// Pending creates and deletes in the real store (LMDB): invisible until committed, committed
// atomically with their runtime record and made account, and removed at the next start.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PendingWork } from '../../src/hosting/pending.js';
import { createLogger } from '../../src/log/index.js';
import type { Runtime } from '../../src/runtime/index.js';
import { openStore, type ServerRecord, type Store } from '../../src/store/index.js';

const dir = mkdtempSync(join(tmpdir(), 'rbx-pending-'));
let store: Store;
test.before(() => {
  store = openStore(dir);
});
test.after(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const log = createLogger({ level: 'error', sink: () => {} });
// only asked about servers without a runtime part here: nothing to delete on the host
const runtime = { get: () => undefined, delete: async () => {} } as unknown as Runtime;

const server = (id: string, accountId: string, pending?: ServerRecord['pending']): ServerRecord => ({
  id, accountId, slug: id.replace('_', '-'), sshPublicKey: `ssh-ed25519 AAAA ${id}`, keyFingerprint: `fp-${id}`,
  memoryBytes: 1, diskBytes: 1, neverSleep: false, suspended: false, flag: null, createdAt: 0, ...(pending ? { pending } : {}),
});
const account = (id: string, phone: string | null = null) => ({ id, keyHash: `h-${id}`, keyEnc: 'x', phone, createdIp: '1.2.3.4', createdAt: 0, balanceUsd: 0 });

test('a server whose create is pending is invisible to the API, SSH and subdomain lookups but keeps its slug; the commit shows it', () => {
  const rec = server('srv_a1', 'acc_a', { op: 'create', by: 'me', until: Date.now() + 60_000 });
  assert.ok(store.servers.insert(rec));
  assert.is(store.servers.get('srv_a1'), undefined);
  assert.is(store.servers.bySlug('srv-a1'), undefined);
  assert.is(store.servers.byKeyFingerprint('fp-srv_a1'), undefined);
  assert.equal(store.servers.listByAccount('acc_a'), []);
  assert.equal(store.servers.all().map((s) => s.id), []);
  assert.equal(store.servers.all({ withPending: true }).map((s) => s.id), ['srv_a1'], 'the per-IP cap counts a create in flight');
  assert.not.ok(store.servers.insert({ ...server('srv_a2', 'acc_b'), slug: 'srv-a1' }), 'its slug stays taken');
  assert.ok(store.commitCreate('srv_a1'));
  assert.is(store.servers.get('srv_a1')?.pending, undefined);
  assert.is(store.servers.bySlug('srv-a1')?.id, 'srv_a1');
  assert.is(store.servers.byKeyFingerprint('fp-srv_a1')?.id, 'srv_a1');
  assert.not.ok(store.commitCreate('srv_a1'), 'a committed create is not committed twice');
});

test('a create past its deadline cannot commit, and commits nothing of it', () => {
  store.servers.insert(server('srv_b1', 'acc_b', { op: 'create', by: 'me', until: Date.now() - 1 }));
  store.servers.hold('acc_b', 'me', Date.now() + 60_000);
  assert.not.ok(store.commitCreate('srv_b1', 'acc_b'));
  assert.ok(store.servers.getAny('srv_b1')?.pending);
  assert.equal(store.servers.holdsAll().map((h) => h.accountId), ['acc_b'], 'the hold stays with it');
  store.servers.remove('srv_b1');
  store.servers.releaseHold('acc_b');
});

test('a start removes what an earlier run left pending and the anonymous accounts its creates made; a verified account and committed work stay', () => {
  const earlier = { op: 'create' as const, by: 'earlier', until: Date.now() + 60_000 };
  for (const a of [account('acc_anon'), account('acc_phone', '+14155550123'), account('acc_kept')]) store.accounts.insert(a);
  store.servers.hold('acc_anon', 'earlier', earlier.until);
  store.servers.hold('acc_phone', 'earlier', earlier.until);
  store.servers.insert(server('srv_c1', 'acc_anon', earlier));
  store.servers.insert(server('srv_c2', 'acc_kept', { ...earlier, op: 'delete' }));
  store.servers.insert(server('srv_c3', 'acc_kept'));
  store.exposures.allocate('srv_c2', 80, 30000, 30010);
  const made = new PendingWork({ store, runtime, log, release: async () => {} });
  assert.equal(made.recover(), { servers: ['srv_c1', 'srv_c2'], accounts: ['acc_anon'] });
  assert.equal(store.servers.all({ withPending: true }).map((s) => s.id).filter((id) => id.startsWith('srv_c')), ['srv_c3']);
  assert.equal(store.exposures.byServer('srv_c2'), [], 'the ports of a server being deleted go with it');
  assert.is(store.accounts.get('acc_anon'), undefined, 'nobody ever got its api_key');
  assert.ok(store.accounts.get('acc_phone'), 'a verified account is found again by its phone');
  assert.ok(store.accounts.get('acc_kept'));
  assert.equal(store.servers.holdsAll(), []);
});

test('an account made by a create is held in the same transaction, or not made at all', () => {
  const work = new PendingWork({ store, runtime, log, release: async () => {} });
  assert.throws(() =>
    work.holdNewAccount(() => {
      store.accounts.insert(account('acc_d1'));
      throw new Error('cut off');
    }),
  );
  assert.is(store.accounts.get('acc_d1'), undefined);
  work.holdNewAccount(() => {
    const a = account('acc_d2');
    store.accounts.insert(a);
    return { account: a };
  });
  assert.equal(store.servers.holdsAll().map((h) => [h.accountId, h.by]), [['acc_d2', work.by]]);
  assert.ok(work.dropAccount('acc_d2'));
  assert.is(store.accounts.get('acc_d2'), undefined);
});

test.run();
