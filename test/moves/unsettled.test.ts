// A move's source started again with a server marked asked, the outcome unknown (moves/asked.ts,
// issue 38 review), run in this process with the registry's names, hosting's clean-up and the
// runtime given to it:
//   - while the registry cannot say (its heartbeat not through, or the read failing) the server's
//     requests and starts are held and nothing of it is started or removed; once the registry
//     places it on the target, this host's copy goes (hosting's dropMoved), then the mark, then the
//     hold (the requests go to the target);
//   - still this host's (`started`): the mark goes, the hold ends, and a server that ran when its
//     move began is started again — after the hold ended (its start would wait on it);
//   - a mark whose server record is gone (a kill between the record's removal and the copy's): what
//     is left goes, then the mark;
//   - the daemon stopping ends the wait, the mark kept.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { silentLogger } from '../../src/log/index.js';
import { UnsettledMoves } from '../../src/moves/asked.js';
import { MoveHolds } from '../../src/moves/holds.js';
import type { MovesDeps } from '../../src/moves/index.js';
import { AskedMoves, type StartAnswer } from '../../src/registry/index.js';
import { keptClock } from '../helpers/clock.js';
import { until } from '../helpers/wait.js';

const ID = 'srv_0123456789ab';

function world(o: { running?: boolean; record?: boolean; asked?: AskedMoves } = {}) {
  const calls: string[] = [];
  const holds = new MoveHolds();
  const asked = o.asked ?? new AskedMoves();
  if (!o.asked) asked.mark(ID, { to: 'host-b', epoch: 3, running: o.running });
  const w = {
    up: false,
    answer: (): Promise<StartAnswer> => Promise.reject(new Error('registry unreachable')),
    record: o.record ?? true,
    reads: 0,
    /** How often the settle loop looked whether the heartbeat reaches the registry. */
    looks: 0,
    /** dropMoved's rounds that leave the copy (its disk not kept aside: dropStaleCopies logs and leaves it). */
    dropFails: 0,
    /** What the runtime's start waits for (a move's hold, StartGuard.waitFor). */
    startWaits: Promise.resolve(),
  };
  const d = {
    log: silentLogger,
    registry: {
      host: 'host-a',
      asked,
      get up() {
        w.looks++;
        return w.up;
      },
      names: { startAt: () => (w.reads++, w.answer()) },
      placements: { sync: async () => void calls.push('sync') },
    },
    store: {
      servers: {
        get: (id: string) => (w.record && id === ID ? { id, slug: 'one' } : undefined),
        getAny: (id: string) => (w.record && id === ID ? { id, slug: 'one' } : undefined),
        all: () => (w.record ? [{ id: ID, slug: 'one' }] : []),
      },
      checkpoints: { list: () => [{ id: 'ckp_1' }], remove: async () => void calls.push('checkpoint record') },
    },
    hosting: {
      core: {
        dropMoved: async (ids: string[]) => (calls.push(`dropMoved ${ids.join(',')}`), w.dropFails > 0 ? w.dropFails-- : (w.record = false), true),
        servers: { delete: async () => void calls.push('delete') },
        exposures: { releaseServer: async () => void calls.push('ports') },
      },
    },
    runtime: {
      start: async () => (calls.push(`start (held: ${holds.ofServer(ID) !== undefined})`), await w.startWaits),
      delete: async () => void calls.push('runtime delete'),
    },
    proxy: { forget: () => void calls.push('forget') },
    clock: keptClock, // the waits keep this process up, as the daemon's listeners do
  } as unknown as MovesDeps;
  const u = new UnsettledMoves(d, silentLogger, holds);
  return { w, u, holds, asked, calls };
}

test('held while the registry cannot say; placed on the target: the copy goes, then the mark and the hold', async () => {
  const { w, u, holds, asked, calls } = world({ running: true });
  u.start();
  assert.ok(holds.ofServer(ID), 'its starts wait');
  assert.ok(holds.ofSlug('one'), 'its requests wait');
  await until('the loop looked twice', () => w.looks >= 2, 5000, 5);
  assert.is(w.reads, 0, 'no read while the heartbeat does not reach the registry (or this run does not hold its name yet)');
  w.up = true; // reached, the read fails
  await until('a read tried', () => w.reads > 0, 5000, 5);
  assert.ok(holds.ofServer(ID) && asked.has(ID), 'still held, still marked');
  assert.equal(calls, []);
  w.answer = async () => ({ host: 'host-b', epoch: 4, lost: false, mine: false });
  await until('settled', () => !asked.has(ID), 10_000, 5);
  await u.idle();
  assert.is(holds.ofServer(ID), undefined, 'the hold ended');
  assert.equal(calls, [`dropMoved ${ID}`, 'forget', 'sync'], 'the copy gone before its requests go on; never started here');
});

test('still this host’s: the mark goes and a server that ran starts again once its hold ended', async () => {
  const { w, u, holds, asked, calls } = world({ running: true });
  w.up = true;
  w.answer = async () => ({ started: 4 });
  u.start();
  await until('settled', () => !asked.has(ID), 5000, 5);
  await u.idle();
  assert.is(holds.ofServer(ID), undefined);
  assert.equal(calls, ['start (held: false)']);
});

test('a mark without a server record: what the copy left goes, then the mark; no registry read needed', async () => {
  const { w, u, asked, calls } = world({ record: false });
  u.start();
  await u.idle();
  assert.not.ok(asked.has(ID));
  assert.equal(calls, ['ports', 'runtime delete', 'checkpoint record']);
  assert.is(w.reads, 0);
});

test('placed on the target but the copy here cannot go: the hold ends at once, only the drop is tried again, the mark kept until the copy is gone', async () => {
  const { w, u, holds, asked, calls } = world({ running: true });
  w.up = true;
  w.answer = async () => ({ host: 'host-b', epoch: 4, lost: false, mine: false });
  w.dropFails = 2;
  u.start();
  await until('the first drop tried', () => calls.length > 0, 5000, 5);
  await until('the hold ended', () => holds.ofServer(ID) === undefined && holds.ofSlug('one') === undefined, 5000, 5);
  assert.ok(asked.has(ID), 'still marked: the copy is here');
  w.up = false; // the drop is tried again whatever the heartbeat says (dropMoved reads the placement itself)
  await until('settled', () => !asked.has(ID), 10_000, 5);
  await u.idle();
  assert.is(w.reads, 1, 'the placement read once: then only the drop');
  assert.equal(calls.filter((c) => c.startsWith('dropMoved')).length, 3);
  assert.not.ok(
    calls.some((c) => c.startsWith('start')),
    'never started here',
  );
});

test('a restart’s start that waits (on a new move’s hold): a new mark of the server is settled meanwhile', async () => {
  const { w, u, holds, asked, calls } = world({ running: true });
  w.up = true;
  w.answer = async () => ({ started: 4 });
  let go!: () => void;
  w.startWaits = new Promise<void>((r) => (go = r));
  u.start();
  await until('the restart’s start under way', () => calls.includes('start (held: false)'), 5000, 5);
  asked.mark(ID, { to: 'host-b', epoch: 5, running: false }); // the new move asked, then failed with its outcome unknown
  w.up = false;
  u.settle(ID);
  assert.ok(holds.ofServer(ID), 'the new mark is being settled: its server held');
  w.up = true;
  await until('the new mark settled', () => !asked.has(ID), 5000, 5);
  go();
  await u.idle();
  assert.is(holds.ofServer(ID), undefined);
});

test('the marks could not be read: every server settled once the registry answers, its requests not held, nothing started', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-unsettled-'));
  try {
    writeFileSync(join(dir, 'marks'), 'not a directory');
    const { w, u, holds, asked, calls } = world({ asked: new AskedMoves(join(dir, 'marks')) });
    assert.ok(asked.has(ID));
    u.start();
    assert.is(holds.ofServer(ID), undefined, 'not held: never moved, it may run');
    await until('the loop looked twice', () => w.looks >= 2, 5000, 5);
    assert.ok(asked.has(ID), 'marked while the registry cannot say');
    w.up = true;
    w.answer = async () => ({ started: 4 });
    await until('settled', () => !asked.has(ID), 5000, 5);
    await u.idle();
    assert.equal(calls, [], 'nothing started or removed');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the daemon stops while the registry cannot say: the wait ends, the mark stays', async () => {
  const { u, holds, asked, calls } = world({ running: true });
  u.start();
  u.stop();
  await u.idle();
  assert.is(holds.ofServer(ID), undefined, 'the hold ended with the daemon');
  assert.ok(asked.has(ID), 'marked for the next run');
  assert.equal(calls, []);
});

test.run();
