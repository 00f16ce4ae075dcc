// Automatic checkpoints while the checkpoint store cannot be reached (issue 37 items 3 and 6), on
// the real engine, the directory store and LMDB, with time on a manual clock: one failed attempt
// with store_unavailable backs the whole host off (no other server's checkpoint is tried until the
// wait is over: an unreachable store costs one attempt per wait, not one per server), the wait
// doubles at each failure, every waiting server is in the backlog and the
// rootbox_checkpoint_backlog gauge says how many, and once the store is back every server is
// checkpointed and the backlog is empty. The store is made unreachable by a wrapper that throws
// StoreUnavailableError, what the S3 backend throws for a refused connection (s3-faults.test).
// The runtime's disk copy is a plain image file (capture.test covers the runtime's freeze).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointEngine, Checkpoints, DirBlobStore, StoreUnavailableError, type BlobStore } from '../../src/checkpoints/index.js';
import { AutoCheckpoints } from '../../src/hosting/autocheckpoints.js';
import { ServerCheckpoints } from '../../src/hosting/checkpoints.js';
import { silentLogger } from '../../src/log/index.js';
import { startMetrics, type MetricsListener } from '../../src/metrics/index.js';
import type { Runtime } from '../../src/runtime/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { ManualClock } from '../helpers/clock.js';
import { parseExposition, sampleValue } from '../helpers/prom.js';

const GB = 1024 ** 3;
const dir = mkdtempSync(join(tmpdir(), 'rbx-ckb-'));
let store: Store;
let m: MetricsListener;
test.after(async () => {
  await store?.close();
  await m?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The directory store, or nothing at all while `away` (every call refused as unreachable). */
class Switchable implements BlobStore {
  away = false;
  refused = 0;
  readonly kind = 'dir' as const;
  constructor(private readonly inner: DirBlobStore) {}
  get where() {
    return this.inner.where;
  }
  private gate(): void {
    if (!this.away) return;
    this.refused++;
    throw new StoreUnavailableError('connect ECONNREFUSED 127.0.0.1:9');
  }
  async put(k: string, b: Uint8Array) {
    this.gate();
    return this.inner.put(k, b);
  }
  async get(k: string) {
    this.gate();
    return this.inner.get(k);
  }
  async has(k: string) {
    this.gate();
    return this.inner.has(k);
  }
  async *list(p: string) {
    this.gate();
    yield* this.inner.list(p);
  }
  async delete(k: string) {
    this.gate();
    return this.inner.delete(k);
  }
  close() {
    return this.inner.close();
  }
}

async function backlogGauge(): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${m.port}/metrics`);
  return sampleValue(parseExposition(await r.text()), 'rootbox_checkpoint_backlog', {}) ?? NaN;
}

test('an unreachable store backs automatic checkpoints off host-wide, doubling the wait; the backlog gauge shows the waiting servers until the store is back', async () => {
  m = await startMetrics('127.0.0.1:0');
  store = openStore(join(dir, 'data'));
  const clock = new ManualClock();
  const blobs = new Switchable(new DirBlobStore(join(dir, 'checkpoints')));
  const engine = new CheckpointEngine({ store: blobs, secret: { key: async () => Buffer.alloc(32, 9) }, now: () => clock.now() });
  const ids = ['srv_one', 'srv_two'];
  const images = new Map(ids.map((id) => [id, join(dir, `${id}.img`)]));
  for (const p of images.values()) writeFileSync(p, randomBytes(1 << 20));
  store.accounts.insert({ id: 'acc_b', keyHash: 'b'.padEnd(64, '0'), keyEnc: '', phone: null, createdIp: '192.0.2.1', createdAt: 0, balanceUsd: 0 });
  for (const id of ids)
    store.servers.insert({
      id,
      accountId: 'acc_b',
      slug: id.replace('_', '-'),
      sshPublicKey: '',
      keyFingerprint: id,
      memoryBytes: GB,
      diskBytes: GB,
      neverSleep: false,
      suspended: false,
      flag: null,
      createdAt: 0,
    });
  const mtime = (id: string) => statSync(images.get(id)!).mtimeMs;
  const runtime = {
    get: (id: string) => (images.has(id) ? { id, state: 'running' } : undefined),
    diskWrittenAt: mtime,
    captureDisk: async <T>(id: string, use: (c: { path: string; pausedMs: number; method: 'copy'; uidBase: number; writtenAt: number }) => Promise<T>) =>
      use({ path: images.get(id)!, pausedMs: 0, method: 'copy', uidBase: 100000, writtenAt: mtime(id) }),
    replaceDisk: async () => undefined,
  } as unknown as Runtime;
  const checkpoints = new ServerCheckpoints(store, runtime, new Checkpoints(engine, runtime));
  const tried: string[] = [];
  const take = checkpoints.take.bind(checkpoints);
  checkpoints.take = (rec, ...rest) => (tried.push(rec.id), take(rec, ...rest));
  const auto = new AutoCheckpoints({ store, runtime, checkpoints, log: silentLogger, clock, settings: { interval: 15 * 60_000, keep: 3, gcInterval: 0 } });
  auto.start();
  try {
    blobs.away = true;
    await auto.tick();
    assert.is(tried.length, 1, 'one attempt meets the unreachable store; the other server is not tried');
    assert.is(auto.backlog(), 2);
    assert.is(await backlogGauge(), 2, 'the gauge shows the backlog');

    clock.advance(20_000);
    await auto.tick();
    auto.slept('srv_two'); // a sleep during the wait does not try it either
    await auto.tick();
    assert.is(tried.length, 1, 'nothing tried before the first wait (30 s) is over');

    clock.advance(10_000); // 30 s
    await auto.tick();
    assert.is(tried.length, 2, 'one attempt after 30 s');
    clock.advance(59_000);
    await auto.tick();
    assert.is(tried.length, 2, 'the wait doubled: nothing before 60 s more');

    blobs.away = false;
    clock.advance(1_000); // 90 s
    await auto.tick();
    assert.is(tried.length, 4, 'both servers tried once the wait is over');
    for (const id of ids) assert.is(store.checkpoints.list(id)[0]?.kind, 'auto', `${id} checkpointed`);
    assert.is(auto.backlog(), 0);
    assert.is(await backlogGauge(), 0);
  } finally {
    auto.stop();
  }
  assert.is(await backlogGauge(), 0, 'a stopped daemon’s backlog is no longer read');
});

test.run();
