// The source's side of a move whose target did not answer (moves/source.ts, issue 38's lost-answer
// path), run in this process with the registry's names, the channel's answer and the runtime given
// to it, so each outcome is seen on its own. A running server is stopped, checkpointed and asked
// for; the target answers a failure (a 5xx: not a refusal, it may have taken the placement). Then
//   - the registry bumps the placement's epoch here (`started`: still this host's): the server is
//     started here again;
//   - the registry places it on the target at a later epoch (it took it, its answer lost): not
//     started here, its copy here goes;
//   - the registry cannot be read, and the daemon stops while the source waits for it: the move
//     fails, and the server is NOT started here (the target may have it; the fence would start it
//     from what this host has while the registry is away).
// The server is marked asked (registry/asked.ts) in the data dir before the target is asked, and
// the mark is removed once the outcome is known (the first two), kept when it is not (the last:
// the next run's wake fence and moves part read it).

import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { PREPARE_PATH } from '../../src/moves/wire.js';
import { AskedMoves, askedDir, type StartAnswer } from '../../src/registry/index.js';
import type { ServerRecord } from '../../src/store/index.js';
import { until } from '../helpers/wait.js';
import { fakeSource } from './helpers/fakesource.js';

const GiB = 1024 ** 3;
const ID = 'srv_0123456789ab';
const rec = { id: ID, accountId: 'acc_1', slug: 'one', memoryBytes: GiB, diskBytes: GiB } as ServerRecord;

/** A source whose target answers 502 and whose registry answers `after` when asked after it. */
function world(after: () => Promise<StartAnswer>, o: { deleteFails?: number } = {}) {
  let deleteFails = o.deleteFails ?? 0;
  const calls: string[] = [];
  let asked = 0;
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-lostanswer-'));
  dirs.push(dataDir);
  /** Whether the server was marked asked on disk when the target was asked. */
  let markedAtAsk: boolean | undefined;
  const { source, unsettled } = fakeSource({
    dataDir,
    state: 'running',
    on: (effect) => {
      calls.push(effect);
      if (effect === 'delete' && deleteFails-- > 0) throw new Error('the runtime could not delete the container');
    },
    names: {
      placement: async () => ({ serverId: ID, host: 'host-a', epoch: 3 }),
      startAt: async () => (asked++, after()),
      forget: () => calls.push('forget-epoch'),
    },
    forwardApi: async (_to, req, res) => {
      if (req.url === PREPARE_PATH) {
        // the running server's prestage (moves/prepare.ts): an older target that has none
        calls.push('prepare');
        res.writeHead(404, { 'content-type': 'application/json' });
        return void res.end(JSON.stringify({ error: 'not_found', detail: 'no such route' }));
      }
      calls.push('ask');
      markedAtAsk = existsSync(join(askedDir(dataDir), ID));
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'move_failed', detail: 'the target broke down' }));
    },
  });
  const move = source.move(rec, 'host-b').then(
    () => 'moved',
    (e: unknown) => (isAppError(e) ? e.code : String(e)),
  );
  /** Whether the mark is on disk now (what a run started after a kill reads). */
  const marked = () => new AskedMoves(askedDir(dataDir)).has(ID);
  return { source, unsettled, move, calls, asked: () => asked, marked, markedAtAsk: () => markedAtAsk };
}
const dirs: string[] = [];
test.after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

test('the registry still places it here (the epoch bumped here): started here again', async () => {
  const w = world(async () => ({ started: 4 }));
  assert.is(await w.move, 'move_failed');
  assert.equal(w.calls, ['prepare', 'stop', 'ask', 'start']);
  assert.is(w.markedAtAsk(), true, 'marked on disk before the target was asked');
  assert.not.ok(w.marked(), 'the outcome known: the mark removed');
});

test('the registry places it on the target at a later epoch (its answer lost): not started here, its copy here goes', async () => {
  const w = world(async () => ({ host: 'host-b', epoch: 4, lost: false, mine: false }));
  assert.is(await w.move, 'moved');
  assert.not.ok(w.calls.includes('start'));
  assert.ok(w.calls.includes('remove') && w.calls.includes('delete'), w.calls.join(','));
  assert.is(w.markedAtAsk(), true, 'marked on disk before the target was asked');
  assert.not.ok(w.marked(), 'the outcome known and the copy gone: the mark removed');
});

test('its copy here not all removed after the move: removed again in the background, then the mark', async () => {
  const w = world(async () => ({ host: 'host-b', epoch: 4, lost: false, mine: false }), { deleteFails: 1 });
  assert.is(await w.move, 'moved');
  await until('the mark removed', () => !w.marked(), 5000, 5);
  await w.unsettled.idle();
  assert.equal(
    w.calls.filter((c) => c === 'delete'),
    ['delete', 'delete'],
    'tried again',
  );
  assert.not.ok(w.calls.includes('start'));
});

test('the registry cannot be read and the daemon stops meanwhile: the move fails, the server is not started here', async () => {
  const w = world(async () => {
    throw new Error('registry unreachable');
  });
  await until('the source to wait for the registry', () => w.asked() > 0, 5000, 5);
  w.unsettled.stop(); // the moves part stops both (moves/part.ts)
  w.source.stop();
  assert.is(await w.move, 'move_failed');
  assert.equal(w.calls, ['prepare', 'stop', 'ask'], 'never started again while the outcome is not known');
  assert.is(w.markedAtAsk(), true, 'marked on disk before the target was asked');
  assert.ok(w.marked(), 'the outcome not known: the mark kept for the next run');
});

test.run();
