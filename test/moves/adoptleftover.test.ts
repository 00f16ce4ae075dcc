// The target's side of a move (moves/target.ts) asked for a server it still holds a pending `move`
// record of — an earlier move a kill -9 cut short, whose resolution at the restart failed (the
// registry away then: takeover.ts resumeMoves tries it again every 10 s). Run in this process with
// the registry's placement and the store's records given to it:
//   - the registry places the server on the source: the leftover is resolved at once (removed) and
//     the new move goes on (before: server_exists, a final move_refused on the source — seen in
//     killmove, seed 12345, target-at-placement);
//   - the registry still cannot be read: a retryable move_failed, the leftover kept.
//   - a stale asked mark of the server here (registry/asked.ts: an earlier move off this host whose
//     copy was not all removed): what is left goes, then the mark, and the move goes on.
// A move past that check meets the account lookup first (none here: move_failed, 'does not find').

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/index.js';
import type { MovesDeps } from '../../src/moves/index.js';
import { adopt } from '../../src/moves/target.js';
import type { AdoptRequest } from '../../src/moves/wire.js';
import { AskedMoves } from '../../src/registry/index.js';
import type { ServerRecord } from '../../src/store/index.js';

const GiB = 1024 ** 3;
const ID = 'srv_0123456789ab';
const server = { id: ID, accountId: 'acc_1', slug: 'one', memoryBytes: GiB, diskBytes: GiB };

function world(placed: () => Promise<unknown>, o: { leftover?: boolean; asked?: AskedMoves } = {}) {
  const effects: string[] = [];
  const records = new Map<string, ServerRecord>([
    [
      ID,
      {
        ...server,
        pending: { op: 'move', by: 'old', since: 0, until: 0, expected: 5 },
        takeover: { from: 'host-a', checkpoint: 'ckp_1' },
      } as unknown as ServerRecord,
    ],
  ]);
  if (o.leftover === false) records.clear();
  const d = {
    cfg: {},
    registry: { host: 'host-b', names: { fenceOf: placed }, asked: o.asked ?? new AskedMoves() },
    runtime: { delete: async () => void effects.push('runtime delete') },
    hosting: {
      core: {
        checkpoints: { engine: { available: true } },
        servers: { pending: { busy: () => false, begin: () => {}, end: () => {} }, abandon: async (id: string) => void records.delete(id) },
        capacity: () => ({ servers: 0, serversMax: 0, memoryFreeBytes: 64 * GiB, memoryRoomBytes: 64 * GiB, diskRoomBytes: 100 * GiB }),
        accounts: { book: { byId: async () => undefined } },
        exposures: { releaseServer: async () => void effects.push('ports') },
      },
    },
    store: {
      checkpoints: { list: () => [] },
      servers: { getAny: (id: string) => records.get(id), pendingAll: () => [...records.values()].filter((x) => x.pending), all: () => [] },
    },
  } as unknown as MovesDeps;
  const a = { server, checkpoint: 'ckp_2', epoch: 7, run: 'run_1', running: false, exposed: [], checkpoints: [], domains: [] } as unknown as AdoptRequest;
  return {
    records,
    effects,
    adopt: () =>
      adopt(d, silentLogger, a, 'host-a').then(
        () => ({ code: 'taken', detail: '' }),
        (e: unknown) => (isAppError(e) ? { code: e.code, detail: e.message } : { code: String(e), detail: '' }),
      ),
  };
}

test('a leftover pending move of the server, placed on the source by the registry: removed at once, the new move goes on', async () => {
  const w = world(async () => ({ host: 'host-a', epoch: 6, lost: false, mine: false }));
  const r = await w.adopt();
  assert.is(w.records.size, 0, 'the leftover removed');
  assert.is(r.code, 'move_failed', r.detail);
  assert.match(r.detail, /does not find the account/, 'past the check: the new move went on');
});

test('a leftover pending move while the registry still cannot be read: a retryable move_failed, the leftover kept', async () => {
  const w = world(async () => {
    throw new Error('registry unreachable');
  });
  const r = await w.adopt();
  assert.is(r.code, 'move_failed', r.detail);
  assert.match(r.detail, /not resolved yet/);
  assert.is(w.records.size, 1, 'kept: the registry may place it here');
});

test('a server moved back here whose earlier move off this host left its asked mark (its copy not all removed): what is left goes, then the mark, and the move goes on', async () => {
  const asked = new AskedMoves();
  asked.mark(ID, { to: 'host-a', epoch: 3, running: true });
  const w = world(async () => undefined, { leftover: false, asked });
  const r = await w.adopt();
  assert.not.ok(asked.has(ID), 'the stale mark cleared: its starts here are not refused while the registry is away');
  assert.equal(w.effects, ['ports', 'runtime delete']);
  assert.match(r.detail, /does not find the account/, 'past the check: the move went on');
});

test.run();
