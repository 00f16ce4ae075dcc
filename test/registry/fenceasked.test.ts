// The wake fence and a move whose outcome this host has not learnt (issue 38 review): a move's
// source marks the server in its data dir before it asks the target (registry/asked.ts), and
//   - a daemon started again on that data dir (the real Registry made again) neither starts nor
//     thaws the server while the registry is down — 503 move_unsettled —, where an unmarked server
//     starts from what the host has, as before;
//   - with the registry answering, a start goes ahead only on the placement read in that check:
//     a read that fails refuses it (move_unsettled); placed on another host (server_moved) or
//     deleted (server_not_found) refuses it and keeps the mark (the copy is still here: a later
//     outage must not start it); `started` (still this host's) lets it start and removes the mark,
//     on disk too, after which the registry down is the old rule again.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/log/index.js';
import { AskedMoves, askedDir, ClusterKeys, newToken, Registry, WakeFence, type FenceAnswer } from '../../src/registry/index.js';

const log = createLogger({ level: 'error', sink: () => {} });
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-fenceasked-'));
  dirs.push(d);
  return d;
};
test.after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function code(p: Promise<unknown> | (() => unknown)): Promise<string | undefined> {
  try {
    await (typeof p === 'function' ? p() : p);
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code ?? String(e);
  }
}

/** The registry part as a restarted daemon makes it on `dataDir`, its registry never reached. */
const registry = (dataDir: string) =>
  new Registry(
    {
      url: 'postgres://rootbox@127.0.0.1:9/rootbox', // never reached in this test
      host: 'host-a',
      advertise: '127.0.0.1:9',
      publicIp: '127.0.0.1',
      version: 'test',
      leaseMs: 3000,
      connectTimeoutMs: 200,
      statementTimeoutMs: 500,
      recoverAfterMs: 0,
      dataDir,
      replaceHost: false,
      keys: new ClusterKeys(newToken()),
      capacity: () => ({}),
    },
    log,
  );

test('a server marked asked before a kill is neither started nor thawed by the next run while the registry is down (503 move_unsettled)', async () => {
  const dataDir = tmp();
  // the source's run that asked: marked on disk before its ask, then killed
  new AskedMoves(askedDir(dataDir)).mark('srv_a', { to: 'host-b', epoch: 3, running: true });
  assert.ok(existsSync(join(askedDir(dataDir), 'srv_a')), 'on disk when mark() returns');
  const r = registry(dataDir);
  try {
    assert.ok(r.asked.has('srv_a'), 'read when the registry part is made');
    assert.is(await code(r.fence.check('srv_a')), 'move_unsettled', 'no start from what this host has');
    assert.is(await code(() => r.fence.checkThaw('srv_a')), 'move_unsettled', 'no thaw either');
    assert.is(await code(r.fence.check('srv_b')), undefined, 'a server not marked starts from what this host has, as before');
    r.fence.checkThaw('srv_b');
  } finally {
    await r.stop();
  }
});

test('with the registry answering, a marked server starts only on its placement read: refused on a failed read, elsewhere or deleted (the mark kept), started on `started` (the mark removed)', async () => {
  const dataDir = tmp();
  const asked = new AskedMoves(askedDir(dataDir));
  asked.mark('srv_a', { to: 'host-b', epoch: 3 });
  const w = { registry: 'held' as 'held' | 'down', answer: (): Promise<FenceAnswer> => Promise.resolve({ started: 4 }), reads: 0 };
  const fence = new WakeFence(
    'host-a',
    { startAt: () => (w.reads++, w.answer()) },
    log,
    () => w.registry,
    () => {},
    () => false,
    asked,
  );
  w.answer = () => Promise.reject(new Error('registry unreachable'));
  assert.is(await code(fence.check('srv_a')), 'move_unsettled', 'a failed read: refused');
  assert.is(await code(fence.check('srv_b')), undefined, 'an unmarked server: started from what this host has, as before');
  w.answer = async () => ({ host: 'host-b', epoch: 4, lost: false, mine: false });
  assert.is(await code(fence.check('srv_a')), 'server_moved', 'placed on the target: refused');
  assert.ok(asked.has('srv_a'), 'the mark kept while the copy is here');
  w.answer = async () => 'deleted';
  assert.is(await code(fence.check('srv_a')), 'server_not_found', 'deleted: refused');
  assert.ok(asked.has('srv_a'));
  w.registry = 'down';
  const reads = w.reads;
  assert.is(await code(fence.check('srv_a')), 'move_unsettled', 'the registry down again: still refused');
  assert.is(w.reads, reads, 'no read tried while the heartbeat finds the registry down');
  assert.is(await code(() => fence.checkThaw('srv_a')), 'move_unsettled');
  w.registry = 'held';
  w.answer = async () => ({ started: 4 });
  assert.is(await code(fence.check('srv_a')), undefined, 'still this host’s: started');
  assert.not.ok(asked.has('srv_a'), 'the mark removed');
  assert.not.ok(existsSync(join(askedDir(dataDir), 'srv_a')), 'on disk too');
  assert.not.ok(new AskedMoves(askedDir(dataDir)).has('srv_a'), 'a run started after that has none');
  w.registry = 'down';
  assert.is(await code(fence.check('srv_a')), undefined, 'settled: the registry down starts from what this host has, as before');
  fence.checkThaw('srv_a');
});

test('a mark file a kill left half written still marks; a rename that never happened marks nothing', () => {
  const dataDir = tmp();
  const a = new AskedMoves(askedDir(dataDir));
  a.mark('srv_a', { to: 'host-b' });
  a.mark('srv_b', { to: 'host-b' });
  rmSync(join(askedDir(dataDir), 'srv_b'));
  // a torn file under the final name, and a temporary one whose rename the kill prevented
  writeFileSync(join(askedDir(dataDir), 'srv_a'), '{"to":"ho');
  writeFileSync(join(askedDir(dataDir), 'srv_b.tmp'), '{"to":"host-b"}');
  const b = new AskedMoves(askedDir(dataDir));
  assert.equal(b.list(), ['srv_a']);
  assert.throws(() => b.mark('../x', {}), /not a server id/);
});

test('a mark whose write threw after its rename (the directory’s fsync): the source’s clear removes its file though it is not marked in memory', () => {
  const dataDir = tmp();
  const a = new AskedMoves(askedDir(dataDir));
  a.mark('srv_b', { to: 'host-b' });
  writeFileSync(join(askedDir(dataDir), 'srv_a'), '{"to":"host-b"}'); // renamed into place; mark() threw before its map was set
  assert.not.ok(a.has('srv_a'));
  a.clear('srv_a');
  assert.not.ok(existsSync(join(askedDir(dataDir), 'srv_a')), 'the file removed');
  assert.not.ok(new AskedMoves(askedDir(dataDir)).has('srv_a'), 'the next run does not find it marked');
  a.clear('srv_c'); // never marked: nothing to remove, no error
  assert.ok(a.has('srv_b'));
});

test('the first mark makes the directory and flushes its entry in the data dir, then the mark’s; later marks flush the directory only', () => {
  const dataDir = tmp();
  const flushed: string[] = [];
  const a = new AskedMoves(askedDir(dataDir), undefined, (dir) => void flushed.push(dir));
  a.mark('srv_a', { to: 'host-b' });
  assert.equal(flushed, [dataDir, askedDir(dataDir)]);
  a.mark('srv_b', { to: 'host-b' });
  a.clear('srv_a');
  assert.equal(flushed, [dataDir, askedDir(dataDir), askedDir(dataDir), askedDir(dataDir)]);
  assert.ok(existsSync(join(askedDir(dataDir), 'srv_b')));
});

test('a marks directory that cannot be read (not absent): every server taken as marked, logged once, until the registry answered for it', async () => {
  const dataDir = tmp();
  writeFileSync(askedDir(dataDir), 'not a directory'); // readdir fails ENOTDIR (as root, a mode 000 directory would still read)
  const errors: string[] = [];
  const asked = new AskedMoves(askedDir(dataDir), (what) => void errors.push(what));
  assert.is(errors.length, 1, 'logged once');
  assert.ok(asked.unreadable);
  assert.ok(asked.has('srv_a') && asked.has('srv_b'), 'every server marked');
  assert.is(asked.get('srv_a')?.unread, true);
  const w = { registry: 'down' as 'down' | 'held', answer: async (): Promise<FenceAnswer> => ({ started: 4 }) };
  const fence = new WakeFence(
    'host-a',
    { startAt: () => w.answer() },
    log,
    () => w.registry,
    () => {},
    () => false,
    asked,
  );
  assert.is(await code(fence.check('srv_a')), 'move_unsettled', 'the registry down: no start from what this host has');
  assert.is(await code(() => fence.checkThaw('srv_a')), 'move_unsettled');
  w.registry = 'held';
  assert.is(await code(fence.check('srv_a')), undefined, 'its placement read: started');
  assert.not.ok(asked.has('srv_a'), 'settled');
  w.registry = 'down';
  assert.is(await code(fence.check('srv_a')), undefined, 'then the old rule');
  assert.ok(asked.has('srv_b'), 'another server not answered for yet: still marked');
  asked.clear('srv_b');
  assert.not.ok(asked.has('srv_b'));
  assert.is(errors.length, 1, 'no error per clear');
});

test.run();
