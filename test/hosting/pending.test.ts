// Pending creates and deletes in the real store (LMDB): invisible until committed, written and
// committed atomically with their runtime record and made account, and removed at the next start.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/index.js';
import { PendingWork } from '../../src/hosting/pending.js';
import { Servers } from '../../src/hosting/servers.js';
import { createLogger } from '../../src/log/index.js';
import { ContainerRuntime, type Runtime, type RuntimeServer, type ServerSpec } from '../../src/runtime/index.js';
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
  id,
  accountId,
  slug: id.replace('_', '-'),
  sshPublicKey: `ssh-ed25519 AAAA ${id}`,
  keyFingerprint: `fp-${id}`,
  memoryBytes: 1,
  diskBytes: 1,
  neverSleep: false,
  suspended: false,
  flag: null,
  createdAt: 0,
  ...(pending ? { pending } : {}),
});
const account = (id: string, phone: string | null = null) => ({
  id,
  keyHash: `h-${id}`,
  keyEnc: 'x',
  phone,
  createdIp: '1.2.3.4',
  createdAt: 0,
  balanceUsd: 0,
});

test('a server whose create is pending is invisible to the API, SSH and subdomain lookups but keeps its slug; the commit shows it', () => {
  const rec = server('srv_a1', 'acc_a', { op: 'create', by: 'me', until: Date.now() + 60_000 });
  assert.ok(store.servers.insert(rec));
  assert.is(store.servers.get('srv_a1'), undefined);
  assert.is(store.servers.bySlug('srv-a1'), undefined);
  assert.is(store.servers.byKeyFingerprint('fp-srv_a1'), undefined);
  assert.equal(store.servers.listByAccount('acc_a'), []);
  assert.equal(
    store.servers.all().map((s) => s.id),
    [],
  );
  assert.equal(
    store.servers.all({ withPending: true }).map((s) => s.id),
    ['srv_a1'],
    'the per-IP cap counts a create in flight',
  );
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
  assert.equal(
    store.servers.holdsAll().map((h) => h.accountId),
    ['acc_b'],
    'the hold stays with it',
  );
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
  assert.equal(
    store.servers
      .all({ withPending: true })
      .map((s) => s.id)
      .filter((id) => id.startsWith('srv_c')),
    ['srv_c3'],
  );
  assert.equal(store.exposures.byServer('srv_c2'), [], 'the ports of a server being deleted go with it');
  assert.is(store.accounts.get('acc_anon'), undefined, 'nobody ever got its api_key');
  assert.ok(store.accounts.get('acc_phone'), 'a verified account is found again by its phone');
  assert.ok(store.accounts.get('acc_kept'));
  assert.equal(store.servers.holdsAll(), []);
});

test('a server handed over by a move is neither dropped by a start nor by a sweep, and commits past its deadline, its takeover kept with it until done', () => {
  // the registry may name this host already (the target killed after its placement write): only its placement decides (src/moves)
  const takeover = { from: 'host-a', checkpoint: 'ck_1', running: true, exposed: [80], checkpoints: [], domains: [] };
  const move = { op: 'move' as const, by: 'earlier', until: Date.now() - 1, expected: 4 };
  store.servers.insert({ ...server('srv_m1', 'acc_m'), pending: move, takeover });
  const made = new PendingWork({ store, runtime, log, release: async () => {} });
  assert.equal(made.recover().servers, [], 'not removed at start');
  made.sweep(Date.now() + 3_600_000);
  assert.equal(store.servers.getAny('srv_m1')?.pending, move, 'not removed by a sweep');
  assert.ok(store.commitCreate('srv_m1'), 'a move commits once its placement is here, whatever its deadline');
  assert.equal(store.servers.get('srv_m1')?.takeover, takeover, 'its takeover kept through the commit');
  store.servers.takeoverDone('srv_m1');
  assert.is(store.servers.get('srv_m1')?.takeover, undefined);
  assert.ok(store.servers.get('srv_m1'));
  store.servers.remove('srv_m1');
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
  assert.equal(
    store.servers.holdsAll().map((h) => [h.accountId, h.by]),
    [['acc_d2', work.by]],
  );
  assert.ok(work.dropAccount('acc_d2'));
  assert.is(store.accounts.get('acc_d2'), undefined);
});

/** Hosting's Servers over a store of their own and a real ContainerRuntime with one uid range;
 *  `build` replaces its create (no container is made; reserve is the runtime's own). */
function hosting(build?: (spec: ServerSpec) => Promise<RuntimeServer>) {
  const own = mkdtempSync(join(tmpdir(), 'rbx-records-'));
  const st = openStore(own);
  const cfg = loadConfig({ env: {}, overrides: { dataDir: own, runtime: { uidRanges: 1, subnet: '10.199.250.0/24', bridge: 'rbtrec', nftTable: 'rbtrec' } } });
  const rt = new ContainerRuntime({ dataDir: own, cfg: cfg.runtime, store: st.runtime, log, image: '', helper: '', initDir: '' });
  const calls: string[] = [];
  if (build) rt.create = build;
  rt.delete = async (id) => void calls.push(`runtime.delete ${id}`);
  const servers = new Servers({
    store: st,
    runtime: rt,
    log,
    domain: 'example.test',
    brands: new Set(),
    maxServersPerAccount: 5,
    anonServersPerIp: 3,
    publicIp: '192.0.2.1',
    makeKeyPair: (c) => ({ privateKey: 'k', publicKey: `ssh-ed25519 AAAA ${c}`, fingerprint: `fp-${c}` }),
    credits: () => ({ tier: 'anonymous', ram_gb_hours_left: 1, egress_gb_left: 1, balance_usd: 0 }),
    exposedPorts: () => [],
    release: async (id) => void calls.push(`release ${id}`),
  });
  const acc = account('acc_r1');
  st.accounts.insert(acc);
  return {
    store: st,
    rt,
    servers,
    calls,
    acc,
    async close() {
      await st.close();
      rmSync(own, { recursive: true, force: true });
    },
  };
}

const view = (spec: ServerSpec): RuntimeServer => ({ ...spec, ip: '10.199.250.2', uidBase: 0, rootfs: '/', state: 'running' });

test('a create writes the server record and the runtime record (address, uid range, no slug or limits) in one transaction, both pending until the commit', async () => {
  let seen: { server?: ServerRecord; runtime?: object } = {};
  const h = hosting(async (spec) => {
    seen = { server: h.store.servers.getAny(spec.id), runtime: h.store.runtime.get(spec.id) };
    return view(spec);
  });
  try {
    const made = await h.servers.create(h.acc, { subdomains: ['records-one'] });
    assert.ok(seen.server?.pending, 'the server record is there, pending, when the runtime starts building');
    assert.equal(
      Object.keys(seen.runtime ?? {}).sort(),
      ['createdAt', 'desired', 'id', 'image', 'ip', 'pending', 'uidBase'],
      'the runtime record holds only what the runtime owns',
    );
    assert.is(seen.server?.memoryBytes, 256 * 1024 * 1024, "the limits are the server record's");
    await h.servers.commit(made);
    assert.is(h.store.servers.get(made.record.id)?.pending, undefined);
    assert.is(h.store.runtime.get(made.record.id)?.pending, undefined);
  } finally {
    await h.close();
  }
});

test('a create refused for want of a uid range writes neither record and has nothing to undo', async () => {
  const h = hosting();
  try {
    h.store.runtime.allocate(
      { id: 'srv_taken', desired: 'running', createdAt: 0 },
      { uidStart: h.rt.deps.cfg.uidStart, uidRanges: 1, ips: () => ['10.199.250.9'] },
    );
    const err = await h.servers.create(h.acc, { subdomains: ['records-two'] }).then(
      () => undefined,
      (e: { code?: string }) => e,
    );
    assert.is(err?.code, 'no_uid_range');
    assert.equal(h.store.servers.all({ withPending: true }), [], 'no server record was written');
    assert.equal(
      h.store.runtime.all().map((r) => r.id),
      ['srv_taken'],
    );
    assert.equal(h.calls, [], 'no release and no runtime delete: there was nothing to undo');
    assert.ok(h.store.servers.insert({ ...server('srv_r9', 'acc_r1'), slug: 'records-two' }), 'the slug was never taken');
  } finally {
    await h.close();
  }
});

test.run();
