// A move's check of its target's reach (moves/source.ts precheck, issue 38): the source's side runs
// in this process with the registry's hosts row, the placement cache's view of the target and the
// channel's word on it given to it, so each case is seen on its own —
//   - a target that has just started (its lease in the registry's row, not yet in the placement
//     cache's view; its channel session not open yet) is probed and waited for, a few seconds at
//     most, and the move goes on only once it answers (before: move_target_down at once, 'host-b
//     is down', or a move that stopped its server only for its ask to meet ECONNREFUSED);
//   - a target whose lease runs but whose channel never answers: move_target_down after the
//     bounded wait, nothing changed;
//   - a target whose lease ran out and whose channel is silent: move_target_down at once, no wait.
// A move past the check meets this host's store first (the test's account is not there: move_failed):
// the point where something would change.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/index.js';
import { UnsettledMoves } from '../../src/moves/asked.js';
import { AskedMoves } from '../../src/registry/index.js';
import { MoveHolds } from '../../src/moves/holds.js';
import { MoveSource } from '../../src/moves/source.js';
import type { MovesDeps } from '../../src/moves/index.js';
import type { ServerRecord } from '../../src/store/index.js';
import { keptClock } from '../helpers/clock.js';

const GiB = 1024 ** 3;
const rec = { id: 'srv_0123456789ab', accountId: 'acc_1', slug: 'one', memoryBytes: GiB, diskBytes: GiB } as ServerRecord;

interface Target {
  /** Its lease by the registry's row. */
  lease: boolean;
  /** The placement cache's view: undefined (not seen yet), or up or not. */
  view?: boolean;
  /** When its channel answers (ms after the move began), never when undefined. */
  answersAfter?: number;
}

/** The move of `rec` to host-b as `t` has it: its error, whether it went past the check, and how it went. */
async function moveTo(t: Target, waitMs = 600) {
  const t0 = performance.now();
  const answering = () => t.answersAfter !== undefined && performance.now() - t0 >= t.answersAfter;
  let probes = 0;
  let past: { answering: boolean } | undefined;
  const d = {
    cfg: { checkpoints: { store: 's3://bucket/x' } },
    log: silentLogger,
    targetWaitMs: waitMs,
    clock: keptClock, // the poll's waits keep this process up, as the daemon's listeners do
    registry: {
      host: 'host-a',
      asked: new AskedMoves(),
      hosts: {
        list: async () => [
          {
            name: 'host-b',
            advertise: '127.0.0.1:1',
            up: t.lease,
            leaseLeftMs: t.lease ? 10_000 : -60_000,
            capacity: { servers: 0, serversMax: 0, memoryFreeBytes: 64 * GiB, memoryRoomBytes: 64 * GiB, diskRoomBytes: 100 * GiB },
            drain: null,
          },
        ],
      },
      placements: { host: () => (t.view === undefined ? undefined : { name: 'host-b', advertise: '127.0.0.1:1', up: t.view || answering(), lease: t.view }) },
    },
    channel: { answering, probe: () => void probes++ },
    hosting: { core: { checkpoints: { engine: { available: true } } } },
    // the first thing a move past the check reads
    store: { accounts: { get: () => void (past = { answering: answering() }) } },
  } as unknown as MovesDeps;
  const holds = new MoveHolds();
  const source = new MoveSource(d, silentLogger, holds, new UnsettledMoves(d, silentLogger, holds));
  let err: unknown;
  await source.move(rec, 'host-b').catch((e: unknown) => (err = e));
  return { code: isAppError(err) ? err.code : String(err), past, probes, ms: performance.now() - t0 };
}

test('a target just started (its lease in the registry, not yet in the view; its channel not open): probed, waited for, the move goes on once it answers', async () => {
  const r = await moveTo({ lease: true, answersAfter: 300 }, 5000);
  assert.ok(r.past, `the move went past the check (${r.code})`);
  assert.ok(r.past!.answering, 'only once the target answered on the channel');
  assert.ok(r.probes > 0, 'the channel was asked to open a session');
  assert.ok(r.ms >= 300 && r.ms < 2000, `waited for the answer (${Math.round(r.ms)} ms)`);
  assert.is(r.code, 'move_failed', "then this host's store (the test's account is not there)");
});

test('a target whose lease runs but whose channel never answers: move_target_down after the bounded wait, nothing changed', async () => {
  const r = await moveTo({ lease: true, view: true }, 600);
  assert.is(r.code, 'move_target_down');
  assert.is(r.past, undefined, 'the move did not go on');
  assert.ok(r.ms >= 550 && r.ms < 3000, `a bounded wait (${Math.round(r.ms)} ms)`);
});

test('a target whose lease ran out and whose channel is silent: move_target_down at once', async () => {
  const r = await moveTo({ lease: false, view: false }, 5000);
  assert.is(r.code, 'move_target_down');
  assert.is(r.past, undefined);
  assert.is(r.probes, 0);
  assert.ok(r.ms < 500, `no wait (${Math.round(r.ms)} ms)`);
});

test('a target whose lease ran out but whose channel answers (cut off from the registry alone): the move goes on at once', async () => {
  const r = await moveTo({ lease: false, view: false, answersAfter: 0 }, 5000);
  assert.ok(r.past?.answering, `the move went past the check (${r.code})`);
  assert.ok(r.ms < 500, `no wait (${Math.round(r.ms)} ms)`);
});

test.run();
