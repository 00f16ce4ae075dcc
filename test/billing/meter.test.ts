// Billing arithmetic and exactly-once charging against the real LMDB store with a controlled
// clock. Usage samples come from a scripted UsageSource (the runtime's stats in production), so
// the expected charges are exact; runtime stop/start calls are recorded.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { closeSync, ftruncateSync, mkdtempSync, openSync, readdirSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Billing, type UsageSample } from '../../src/billing/index.js';
import { CheckpointEngine, DirBlobStore, newCheckpointId } from '../../src/checkpoints/index.js';
import { silentLogger } from '../../src/log/index.js';
import { openStore, type Store } from '../../src/store/index.js';

const GB = 1024 ** 3;
const HOUR = 3_600_000;
const dirs: string[] = [];
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

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

function setup(dir = mkdtempSync(join(tmpdir(), 'rbx-bill-')), o: { now?: () => number; owns?: (id: string) => boolean } = {}) {
  if (!dirs.includes(dir)) dirs.push(dir);
  const store = openStore(dir);
  const samples = new Map<string, UsageSample>();
  const calls: string[] = [];
  const billing = new Billing({
    cfg,
    store,
    log: silentLogger,
    runtime: { stop: async (id) => void calls.push(`stop ${id}`), start: async (id) => void calls.push(`start ${id}`) },
    usage: async (id) => samples.get(id),
    ...o,
  });
  return { dir, store, samples, calls, billing };
}

function account(store: Store, id: string, phone: string | null = null) {
  store.accounts.insert({ id, keyHash: id.padEnd(64, '0'), keyEnc: '', phone, createdIp: '192.0.2.1', createdAt: 0, balanceUsd: 0 });
}
function server(store: Store, id: string, accountId: string, neverSleep = false) {
  store.servers.insert({
    id,
    accountId,
    slug: id.replace('_', '-'),
    sshPublicKey: '',
    keyFingerprint: id,
    memoryBytes: GB,
    diskBytes: GB,
    neverSleep,
    suspended: false,
    flag: null,
    createdAt: 0,
  });
}

test('RAM is charged in GB-hours only while awake; disk in GB-months; egress from counter deltas', async () => {
  const { store, samples, billing } = setup();
  account(store, 'acc_a');
  server(store, 'srv_awake', 'acc_a');
  server(store, 'srv_sleep', 'acc_a');
  server(store, 'srv_never', 'acc_a', true);
  const t0 = 1_000_000_000_000;
  samples.set('srv_awake', { awake: true, memoryBytes: 0.5 * GB, diskUsedBytes: 1 * GB, egressBytes: 100 });
  samples.set('srv_sleep', { awake: false, memoryBytes: 0, diskUsedBytes: 2 * GB, egressBytes: 0 });
  samples.set('srv_never', { awake: true, memoryBytes: 0.25 * GB, diskUsedBytes: 0, egressBytes: 0 });
  await billing.tick(t0);
  samples.set('srv_awake', { awake: true, memoryBytes: 0.5 * GB, diskUsedBytes: 1 * GB, egressBytes: 100 + 0.5 * GB });
  await billing.tick(t0 + 2 * HOUR);
  const entries = (await billing.usage(store.accounts.get('acc_a')!, '10', null)).entries;
  const by = (id: string) => entries.find((e) => e.server === id)!;
  assert.is(by('srv_awake').ram_gb_hours, 1);
  assert.is(by('srv_sleep').ram_gb_hours, 0);
  assert.is(by('srv_never').ram_gb_hours, 0.5);
  assert.ok(Math.abs(by('srv_sleep').disk_gb_months - 4 / 730) < 1e-12);
  assert.is(by('srv_awake').egress_gb, 0.5);
  const c = billing.credits(store.accounts.get('acc_a')!);
  assert.is(c.ram_gb_hours_left, 8.5);
  assert.is(c.egress_gb_left, 0.5);
  assert.ok(c.balance_usd < 0 && c.balance_usd > -0.01, 'disk draws on the balance');
  await store.close();
});

test('a restart in the middle of a period charges it exactly once and skips nothing', async () => {
  const first = setup();
  account(first.store, 'acc_r');
  server(first.store, 'srv_r', 'acc_r');
  const t0 = 1_000_000_000_000;
  first.samples.set('srv_r', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
  await first.billing.tick(t0);
  await first.billing.tick(t0 + HOUR);
  await first.store.close();
  const again = setup(first.dir);
  again.samples.set('srv_r', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
  await again.billing.tick(t0 + HOUR);
  await again.billing.tick(t0 + HOUR + 30_000);
  await again.billing.tick(t0 + 3 * HOUR);
  const used = again.store.billing.usageOf('acc_r');
  assert.is(used.ramGbHours, 3, 'hours 0-1 once, 1-3 once');
  assert.is((await again.billing.usage(again.store.accounts.get('acc_r')!, null, null)).entries.length, 2);
  await again.store.close();
});

test('a server moved between hosts is charged by one at a time: by the source up to the hand-off, by the target from it; a failed move goes on at the source', async () => {
  const t0 = 1_000_000_000_000;
  let now = t0;
  const src = setup(undefined, { now: () => now });
  const dst = setup(undefined, { now: () => now });
  for (const h of [src, dst]) {
    account(h.store, 'acc_m');
    h.samples.set('srv_m', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
  }
  server(src.store, 'srv_m', 'acc_m');
  await src.billing.tick(t0);
  await src.billing.tick(t0 + HOUR);
  // a move that fails: charged up to its hand-off, nothing while it runs, then on from the hand-off
  now = t0 + 1.5 * HOUR;
  assert.is(await src.billing.handOff('srv_m'), now);
  await src.billing.tick(t0 + 2 * HOUR);
  assert.is(src.store.billing.cursor('srv_m')?.at, t0 + 1.5 * HOUR, 'not charged while its move runs');
  src.billing.handedOff('srv_m', false);
  await src.billing.tick(t0 + 2 * HOUR);
  assert.is(src.store.billing.usageOf('acc_m').ramGbHours, 2);
  // a move that succeeds: egress sent just before it charged by the source, the rest by the target
  src.billing.egress('srv_m', GB / 4);
  now = t0 + 2.5 * HOUR;
  const at = await src.billing.handOff('srv_m');
  server(dst.store, 'srv_m', 'acc_m');
  dst.samples.set('srv_m', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: GB / 2 });
  now += 5_000; // the target's clock when it takes the server over
  dst.billing.takeOver('srv_m', at);
  src.store.servers.remove('srv_m');
  src.billing.handedOff('srv_m', true);
  assert.is(src.store.billing.cursor('srv_m'), undefined, "the source's meter of it goes");
  await src.billing.tick(t0 + 4 * HOUR);
  await dst.billing.tick(t0 + 4 * HOUR);
  const [s, d] = [src.store.billing.usageOf('acc_m'), dst.store.billing.usageOf('acc_m')];
  assert.is(s.ramGbHours, 2.5);
  assert.is(d.ramGbHours, 1.5);
  assert.is(s.ramGbHours + d.ramGbHours, 4, 'four hours charged for four hours, once each');
  assert.is(s.egressGb, 0.25);
  assert.is(d.egressGb, 0.5, "the target's counter from 0");
  // back to the source: a meter it kept of an earlier stay is replaced, not resumed
  src.store.billing.startMeter('srv_m', t0, 0);
  now = t0 + 5 * HOUR;
  const back = await dst.billing.handOff('srv_m');
  server(src.store, 'srv_m', 'acc_m');
  src.billing.takeOver('srv_m', back);
  dst.store.servers.remove('srv_m');
  dst.billing.handedOff('srv_m', true);
  await src.billing.tick(t0 + 6 * HOUR);
  assert.is(src.store.billing.usageOf('acc_m').ramGbHours + dst.store.billing.usageOf('acc_m').ramGbHours, 6);
  // a clock far off: the target meters from its own now
  dst.billing.takeOver('srv_x', now - 3 * HOUR);
  assert.is(dst.store.billing.cursor('srv_x')?.at, now);
  for (const h of [src, dst]) await h.store.close();
});

test('a server the registry places on another host is not metered here', async () => {
  const { store, samples, billing } = setup(undefined, { owns: (id) => id !== 'srv_gone' });
  account(store, 'acc_o');
  server(store, 'srv_gone', 'acc_o');
  server(store, 'srv_here', 'acc_o');
  for (const id of ['srv_gone', 'srv_here']) samples.set(id, { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
  const t0 = 1_000_000_000_000;
  await billing.tick(t0);
  await billing.tick(t0 + HOUR);
  assert.is(store.billing.usageOf('acc_o').ramGbHours, 1, 'srv_here alone');
  assert.is(store.billing.cursor('srv_gone'), undefined);
  await store.close();
});

test('grant used up → upgrade envelope → 48 h later suspension → credit → servers back', async () => {
  const { store, samples, calls, billing } = setup();
  account(store, 'acc_x');
  server(store, 'srv_x', 'acc_x');
  const t0 = 1_000_000_000_000;
  samples.set('srv_x', { awake: true, memoryBytes: 2 * GB, diskUsedBytes: 0, egressBytes: 0 });
  await billing.tick(t0);
  await billing.tick(t0 + 4 * HOUR);
  const acc = () => store.accounts.get('acc_x')!;
  assert.not.throws(() => billing.assertNotExhausted(acc(), 'https://api.example'));
  await billing.tick(t0 + 6 * HOUR);
  let envelope: Record<string, unknown> | undefined;
  try {
    billing.assertNotExhausted(acc(), 'https://api.example');
  } catch (e) {
    envelope = (e as { extra: Record<string, unknown> }).extra;
  }
  assert.equal(
    { ...envelope, message: undefined },
    { upgrade_required: true, reason: 'free_tier_exceeded', upgrade_url: 'https://api.example/account/recharge', message: undefined },
  );
  assert.match(String(envelope!.message), /48h/);
  await billing.tick(t0 + 30 * HOUR);
  assert.is(store.servers.get('srv_x')!.suspended, false, 'not before 48 h');
  await billing.tick(t0 + 55 * HOUR);
  assert.is(store.servers.get('srv_x')!.suspended, true);
  assert.equal(calls, ['stop srv_x']);
  assert.ok(await billing.credit('acc_x', 5, 'admin:1'));
  assert.not.ok(await billing.credit('acc_x', 5, 'admin:1'), 'the same credit source applies once');
  assert.is(store.servers.get('srv_x')!.suspended, false);
  assert.equal(calls, ['stop srv_x', 'start srv_x']);
  assert.is(billing.credits(acc()).tier, 'paid');
  await store.close();
});

test('verifying a phone replaces the anonymous grant with the larger verified one', async () => {
  const { store, samples, billing } = setup();
  account(store, 'acc_p');
  server(store, 'srv_p', 'acc_p');
  samples.set('srv_p', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
  await billing.tick(0 + 1e12);
  await billing.tick(1e12 + 20 * HOUR);
  assert.ok(store.accounts.get('acc_p')!.balanceUsd < 0);
  store.accounts.attachPhone('acc_p', '+14155550111');
  const c = billing.credits(store.accounts.get('acc_p')!);
  assert.is(c.tier, 'verified');
  assert.is(c.ram_gb_hours_left, 80);
  await store.close();
});

test('egress the daemon reports is charged; a NaN, negative or infinite count is ignored instead of poisoning the bill', async () => {
  const { store, samples, billing } = setup();
  account(store, 'acc_e');
  server(store, 'srv_e', 'acc_e');
  samples.set('srv_e', { awake: false, memoryBytes: 0, diskUsedBytes: 0, egressBytes: 0 });
  await billing.tick(1e12);
  billing.meter.addEgress('srv_e', 0.25 * GB);
  billing.meter.addEgress('srv_e', NaN);
  billing.meter.addEgress('srv_e', -GB);
  billing.meter.addEgress('srv_e', Infinity);
  billing.meter.addEgress('srv_e', 0.25 * GB);
  await billing.tick(1e12 + HOUR);
  assert.is(store.billing.usageOf('acc_e').egressGb, 0.5);
  assert.is(billing.credits(store.accounts.get('acc_e')!).egress_gb_left, 0.5);
  await store.close();
});

test('the usage ledger pages with an opaque cursor', async () => {
  const { store, samples, billing } = setup();
  account(store, 'acc_l');
  server(store, 'srv_l', 'acc_l');
  samples.set('srv_l', { awake: true, memoryBytes: GB, diskUsedBytes: 0, egressBytes: 0 });
  for (let i = 0; i < 6; i++) await billing.tick(1e12 + i * HOUR);
  const a = await billing.usage(store.accounts.get('acc_l')!, '3', null);
  assert.is(a.entries.length, 3);
  assert.ok(a.next_cursor);
  const b = await billing.usage(store.accounts.get('acc_l')!, '3', a.next_cursor);
  assert.is(b.entries.length, 2);
  assert.is(b.next_cursor, null);
  assert.ok(a.entries[0].to > b.entries[0].to, 'newest first');
  try {
    await billing.usage(store.accounts.get('acc_l')!, '3', 'garbage!');
    assert.unreachable();
  } catch (e) {
    assert.is((e as { code: string }).code, 'invalid_request');
  }
  await store.close();
});

/** Bytes of every file under `dir` (the directory store's sealed chunks). */
function bytesUnder(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) if (e.isFile()) n += statSync(join(e.parentPath, e.name)).size;
  return n;
}

test('checkpoint storage is metered from the bytes the checkpoints stored, shown in /usage and /credits, and always paid like disk', async () => {
  const { dir, store, samples, billing } = setup();
  store.accounts.insert({ id: 'acc_c', keyHash: 'c'.padEnd(64, '0'), keyEnc: '', phone: null, createdIp: '192.0.2.1', createdAt: 0, balanceUsd: 10 });
  server(store, 'srv_c', 'acc_c');
  samples.set('srv_c', { awake: false, memoryBytes: 0, diskUsedBytes: 0, egressBytes: 0 });
  // two real checkpoints in the directory store: 3 MiB, then 1 MiB more (the first's chunks shared)
  const MiB = 1 << 20;
  const blobs = new DirBlobStore(join(dir, 'checkpoints'));
  const engine = new CheckpointEngine({ store: blobs, secret: { key: async () => Buffer.alloc(32, 7) } });
  const img = join(dir, 'disk.img');
  const fd = openSync(img, 'w');
  ftruncateSync(fd, 64 * MiB);
  writeSync(fd, randomBytes(3 * MiB), 0, 3 * MiB, 8 * MiB);
  let t = 1_000_000_000_000;
  const take = async () => {
    const m = await engine.write(
      { id: newCheckpointId(t), serverId: 'srv_c', createdAt: t++, kind: 'manual', settings: { tier: 'anonymous', image: '', slug: 'c', runSh: false } },
      img,
    );
    await store.checkpoints.add({
      id: m.id,
      serverId: 'srv_c',
      accountId: 'acc_c',
      createdAt: m.createdAt,
      kind: 'manual',
      sizeBytes: m.dataBytes,
      newBytes: m.newBytes,
    });
    return m;
  };
  const first = await take();
  writeSync(fd, randomBytes(MiB), 0, MiB, 32 * MiB);
  closeSync(fd);
  const second = await take();
  const stored = first.newBytes + second.newBytes;
  assert.ok(stored > 4 * MiB && second.newBytes < 1.01 * MiB, `the 4 MiB stored once (${first.newBytes} + ${second.newBytes})`);
  assert.is(bytesUnder(join(dir, 'checkpoints', 'chunks')), stored, "the store's chunk files hold exactly what is billed");
  assert.is(billing.credits(store.accounts.get('acc_c')!).checkpoint_bytes, stored, '/credits shows the stored bytes');

  const t0 = 1_000_000_000_000;
  await billing.tick(t0);
  await billing.tick(t0 + 730 * HOUR); // one month
  const [e] = (await billing.usage(store.accounts.get('acc_c')!, '10', null)).entries;
  assert.ok(Math.abs(e.checkpoint_gb_months - stored / GB) < 1e-9, `${e.checkpoint_gb_months} GB-months`);
  assert.ok(Math.abs(e.usd - (stored / GB) * 0.1) < 1e-9, 'priced at checkpointUsdPerGbMonth');
  const c = billing.credits(store.accounts.get('acc_c')!);
  assert.is(c.ram_gb_hours_left, cfg.grantRamGbHours, 'the grant is untouched');
  assert.ok(Math.abs(c.balance_usd - (10 - (stored / GB) * 0.1)) < 1e-4, 'the balance paid for it');
  assert.ok(Math.abs((store.billing.usageOf('acc_c').checkpointGbMonths ?? 0) - stored / GB) < 1e-9, 'the account total');
  await store.close();
});

test.run();
