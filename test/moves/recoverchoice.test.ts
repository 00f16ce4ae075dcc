// Which checkpoint a dead host's server is recovered from (issue 38, review: lineage, not clocks).
// Two hosts share one checkpoint store (the directory backend, real sealing), each engine with its
// own clock — host-a's ten minutes ahead of host-b's. The manifests are written by the real
// engine through the checkpoints service (and, for the epoch's way in, hosting's checkpoints with a
// real LMDB store), read back from the store, and given to the recovery's choice:
//   - after a move from host-a (epoch 3) to host-b (epoch 4), host-a — not told yet — writes one
//     more checkpoint: stamped later by its clock, it is still not the newest of the lineage;
//   - manifests without an epoch (written before it was recorded) rank below every one with an
//     epoch, by time among themselves;
//   - a manifest whose epoch is above the placement's cannot be legitimate: skipped, never chosen.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointEngine, Checkpoints, DirBlobStore, type Manifest } from '../../src/checkpoints/index.js';
import { ServerCheckpoints } from '../../src/hosting/checkpoints.js';
import { recoveryCheckpoint } from '../../src/moves/recover.js';
import { openStore, type AccountRecord, type ServerRecord } from '../../src/store/index.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-lineage-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const T0 = Date.UTC(2026, 10, 29, 6, 0, 0);
const SKEW = 10 * 60_000;
const settings = { tier: 'anonymous', image: 'base', slug: 'blog', runSh: false };

/** One host's checkpoints over the shared store: its own clock (`at`), a disk image of its own. */
function host(store: DirBlobStore, at: { now: number }) {
  const dir = tmp();
  const img = join(dir, 'disk.img');
  writeFileSync(img, Buffer.alloc(64 * 1024, 1));
  const engine = new CheckpointEngine({ store, secret: { key: async () => Buffer.alloc(32, 7) }, now: () => at.now });
  const runtime = {
    captureDisk: async <T>(_id: string, use: (c: { path: string; pausedMs: number; method: 'copy'; uidBase: number; writtenAt: number }) => Promise<T>) => {
      copyFileSync(img, `${img}.ckp`);
      return use({ path: `${img}.ckp`, pausedMs: 0, method: 'copy', uidBase: 0, writtenAt: at.now });
    },
    replaceDisk: async () => {},
  };
  return { engine, cps: new Checkpoints(engine, runtime) };
}

test('after a move, a checkpoint the old host wrote late (its clock ahead) is not the one recovered: the new epoch is', async () => {
  const store = new DirBlobStore(tmp());
  const clockA = { now: T0 + SKEW }; // host-a's clock runs ten minutes ahead
  const clockB = { now: T0 };
  const a = host(store, clockA);
  const b = host(store, clockB);
  const before = (await a.cps.take('srv_a', settings, 'auto', 'before the move', 3)).manifest;
  clockA.now += 1000;
  clockB.now += 1000;
  const moved = (await a.cps.take('srv_a', settings, 'auto', 'moved to host-b', 3)).manifest;
  // host-b took the placement from epoch 3 (4) and started it (5); its own checkpoint then
  clockB.now += 60_000;
  const onB = (await b.cps.take('srv_a', settings, 'auto', undefined, 5)).manifest;
  // host-a, not told yet, writes one more under its epoch, later by its clock than host-b's
  clockA.now += 5000;
  const late = (await a.cps.take('srv_a', settings, 'auto', undefined, 3)).manifest;
  const listed = await a.engine.list('srv_a');
  assert.equal(
    listed.map((m) => m.epoch),
    [3, 3, 3, 5],
    'read back with their epochs, listed by time (host-a stamped later)',
  );
  assert.is(listed[0].id, late.id, "by the clocks, host-a's late checkpoint looks newest");
  const pick = recoveryCheckpoint(listed, 5);
  assert.is(pick.chosen?.id, onB.id, `recovered from host-b's checkpoint (epoch 5), not host-a's late one: chose ${pick.chosen?.comment ?? pick.chosen?.id}`);
  assert.equal(
    pick.ordered.map((m) => m.id),
    [onB.id, late.id, moved.id, before.id],
  );
  assert.equal(pick.skipped, []);
});

test('manifests without an epoch rank below any with one, by time among themselves; one above the placement epoch is skipped', async () => {
  const store = new DirBlobStore(tmp());
  const clock = { now: T0 + 3_600_000 };
  const a = host(store, clock);
  const legacyNew = (await a.cps.take('srv_b', settings, 'auto')).manifest; // before epochs were recorded: none
  clock.now -= 120_000; // another host's clock behind
  const withEpoch = (await a.cps.take('srv_b', settings, 'auto', undefined, 1)).manifest;
  clock.now -= 600_000;
  const legacyOld = (await a.cps.take('srv_b', settings, 'auto')).manifest;
  clock.now += 3_600_000;
  const forged = (await a.cps.take('srv_b', settings, 'manual', 'from the future', 9)).manifest;
  const listed = await a.engine.list('srv_b');
  assert.is(listed[0].id, forged.id);
  assert.not.ok('epoch' in listed.find((m) => m.id === legacyNew.id)!, 'a manifest without an epoch has no such field');
  const pick = recoveryCheckpoint(listed, 2);
  assert.is(pick.chosen?.id, withEpoch.id);
  assert.equal(
    pick.ordered.map((m) => m.id),
    [withEpoch.id, legacyNew.id, legacyOld.id],
  );
  assert.equal(
    pick.skipped.map((m: Manifest) => m.id),
    [forged.id],
  );
  // only manifests of before: the newest by time
  const old = recoveryCheckpoint(
    listed.filter((m) => m.epoch === undefined),
    2,
  );
  assert.is(old.chosen?.id, legacyNew.id);
  assert.is(recoveryCheckpoint([forged], 2).chosen, undefined, 'none usable: nothing chosen');
});

test("hosting's checkpoints record the placement epoch this host runs the server under, and wait while it is not known", async () => {
  const dir = tmp();
  const db = openStore(dir);
  try {
    const clock = { now: T0 };
    const a = host(new DirBlobStore(tmp()), clock);
    const epochs = new Map([['srv_c', 7]]);
    const runtime = { get: () => undefined, diskWrittenAt: () => undefined };
    const cps = new ServerCheckpoints(db, runtime as never, a.cps, undefined, { epochOf: (id) => epochs.get(id) });
    const rec = { id: 'srv_c', accountId: 'acc_1', slug: 'blog' } as ServerRecord;
    const account = { id: 'acc_1', balanceUsd: 0, phone: null } as AccountRecord;
    const r = await cps.take(rec, account, 'auto');
    const m = await a.engine.read('srv_c', r.id);
    assert.is(m?.epoch, 7);
    epochs.clear(); // no epoch known (the registry away since this run started): no checkpoint without one
    clock.now += 1000;
    for (const kind of ['manual', 'auto'] as const) {
      const e = await cps.take(rec, account, kind).then(
        () => undefined,
        (err: unknown) => err,
      );
      assert.is((e as { code?: string })?.code, 'registry_unavailable', `${kind}: refused until the placement is read`);
    }
    assert.equal(
      (await a.cps.list('srv_c')).map((m) => m.id),
      [r.id],
      'nothing written: the one with epoch 7 stays the newest',
    );
    epochs.set('srv_c', 9); // read at last
    const r2 = await cps.take(rec, account, 'manual');
    assert.is((await a.engine.read('srv_c', r2.id))?.epoch, 9);
  } finally {
    await db.close();
  }
});

test.run();
