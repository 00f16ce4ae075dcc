// The self-fence, the wake fence and the idle tracker's thaw together (review 2, findings 1–3), with
// contact and time set by the test (the fence's checks run by hand) and servers that are plain
// processes (SIGSTOP is the freeze: ProcessRuntime):
//   - while the host fences itself, a dozing server is not thawed — not by a request's wake, a TLS
//     ClientHello's thawIfDozing, nor a byte's touch — and wake() answers 503 host_fenced;
//   - after a fence that reached its stop, a peer answering before the registry does not let a
//     start (or a thaw) go ahead on what this host alone knows: host_fenced until the clean-up
//     read the placements;
//   - the clean-up is called again at the next check when it failed, and runs before the thaw; a
//     server whose fence stop failed stays frozen until the clean-up succeeded;
//   - a daemon restarted while that stop is unsettled (the real Registry made again on the same
//     data dir) still refuses every start and thaw from what it alone knows, before its self-fence
//     runs, until the registry answered and the clean-up read the placements.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Clock } from '../../src/clock.js';
import { createLogger } from '../../src/log/index.js';
import { startPresence } from '../../src/presence/part.js';
import {
  assertNotCutOff,
  ClusterKeys,
  FenceSettlement,
  fenceBounds,
  fenceStateFile,
  newToken,
  Registry,
  SelfFence,
  WakeFence,
  type FenceAnswer,
  type FencedServers,
} from '../../src/registry/index.js';
import type { Contact } from '../../src/registry/contact.js';
import { dropMoved } from '../../src/hosting/stalecopies.js';
import { ProcessRuntime, freePort } from '../helpers/procruntime.js';
import { until } from '../helpers/wait.js';

const R = 8000;
const B = fenceBounds(R);
const log = createLogger({ level: 'error', sink: () => {} });
const procState = (pid: number) => /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1];
const noClock: Clock = { now: () => 0, after: () => ({ cancel() {}, refresh() {} }), every: () => ({ cancel() {}, refresh() {} }) };

/** The contact as the test sets it: cut off for `cut` ms (undefined: the registry or a peer answers), the registry up or not. */
function world() {
  const w = { cut: undefined as number | undefined, up: true, placement: { started: 2 } as FenceAnswer, starts: 0 };
  const contact = { tick() {}, cutOffForMs: () => w.cut, knowsPeers: () => true, registryUp: () => w.up } as unknown as Contact;
  return { w, contact };
}

/** The wake fence wired as registry.ts wires it (cut-off check first, the self-fence's unsettled stop). */
function wakeFence(w: ReturnType<typeof world>['w'], contact: Contact, self: () => SelfFence | undefined): WakeFence {
  const names = { startAt: async (): Promise<FenceAnswer> => (w.starts++, w.placement) };
  return new WakeFence(
    'host-b',
    names,
    log,
    () => (w.up ? 'held' : 'down'),
    (id) => assertNotCutOff(contact, R, log, id),
    () => self()?.unsettled ?? false,
  );
}

async function code(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code ?? String(e);
  }
}

test('while the host fences itself, a dozing server is thawed by neither a wake, a ClientHello nor a touch (503 host_fenced)', async () => {
  const { w, contact } = world();
  const fence = wakeFence(w, contact, () => undefined);
  const rt = new ProcessRuntime();
  rt.add('srv_a', 'a', '/nonexistent', await freePort());
  const cfg = { proxy: { idleTimeout: 100, dozeTimeout: 600_000, dozeMemoryFloor: 0, idleCheckInterval: 20 } };
  const presence = startPresence({ cfg: cfg as never, store: { servers: { get: () => ({}) } }, runtime: rt, log, registry: { fence } });
  try {
    await rt.start('srv_a');
    const pid = rt.servers.get('srv_a')!.child!.pid!;
    await until('the server dozes', () => presence.isDozing('srv_a'));
    assert.is(procState(pid), 'T');
    w.up = false;
    w.cut = B.freezeMs + 1; // cut off past the freeze bound
    assert.is(presence.thawIfDozing('srv_a'), undefined, 'a ClientHello thaws nothing');
    presence.touch('srv_a');
    assert.is(await code(presence.wake('srv_a')), 'host_fenced');
    await new Promise((r) => setTimeout(r, 50));
    assert.is(procState(pid), 'T', 'still frozen');
    assert.ok(presence.isDozing('srv_a'));
    w.cut = undefined; // a peer answers again, no stop was made: thawed as before
    await presence.wake('srv_a');
    assert.is.not(procState(pid), 'T');
  } finally {
    presence.stop();
    await rt.stopAll();
  }
});

/** This host's servers as the self-fence acts on them, each call recorded; `failStop`: stops that fail. */
function servers(ids: string[], failStop = new Set<string>()) {
  const calls: string[] = [];
  const running = new Set(ids);
  const frozen = new Set<string>();
  const s: FencedServers = {
    running: () => [...running],
    frozen: (id) => frozen.has(id),
    freeze: async (id) => void (frozen.add(id), calls.push(`freeze ${id}`)),
    thaw: async (id) => void (frozen.delete(id), calls.push(`thaw ${id}`)),
    stop: async (id) => {
      calls.push(`stop ${id}`);
      if (failStop.has(id)) throw new Error('runc says no');
      running.delete(id);
      frozen.delete(id);
    },
  };
  return { s, calls, frozen, running };
}

test('after a fence that stopped servers, a peer answering before the registry lets no start go ahead unread; the registry back and cleaned up, it does', async () => {
  const { w, contact } = world();
  const srv = servers(['srv_a']);
  let healed = 0;
  const sf = new SelfFence({ contact, servers: srv.s, recoverAfterMs: R, log, clock: noClock, healed: async () => void healed++ });
  const fence = wakeFence(w, contact, () => sf);
  w.up = false;
  w.cut = B.freezeMs + 1;
  await sf.tick();
  w.cut = B.stopMs + 1;
  await sf.tick();
  assert.equal(srv.calls, ['freeze srv_a', 'stop srv_a']);
  assert.is(await code(fence.check('srv_a')), 'host_fenced', 'fenced: no start');
  // a peer answers, the registry still does not: the fence ends, its stop is not settled
  w.cut = undefined;
  await sf.tick();
  assert.is(sf.now, 'serve');
  assert.is(await code(fence.check('srv_a')), 'host_fenced', 'no start from what this host has (another host may run it now)');
  assert.throws(
    () => fence.checkThaw('srv_a'),
    (e: { code?: string }) => e.code === 'host_fenced',
  );
  assert.is(healed, 0);
  // the registry answers: the clean-up reads the placements; starts ask the registry again
  w.up = true;
  await sf.tick();
  assert.is(healed, 1);
  assert.not.ok(sf.unsettled);
  assert.is(await code(fence.check('srv_a')), undefined);
  assert.is(w.starts, 1, 'its placement read');
  fence.checkThaw('srv_a');
});

test('a failed clean-up is tried again at the next check, before any thaw; a server whose fence stop failed stays frozen until then', async () => {
  const { w, contact } = world();
  const srv = servers(['srv_a', 'srv_b'], new Set(['srv_b']));
  let fail: 'throw' | 'false' | undefined = 'throw';
  const healed: string[] = [];
  const sf = new SelfFence({
    contact,
    servers: srv.s,
    recoverAfterMs: R,
    log,
    clock: noClock,
    healed: async () => {
      srv.calls.push('healed');
      healed.push(fail ? 'failed' : 'done');
      if (fail === 'throw') throw new Error('registry read failed');
      return fail !== 'false';
    },
  });
  w.up = false;
  w.cut = B.freezeMs + 1;
  await sf.tick();
  w.cut = B.stopMs + 1;
  await sf.tick();
  assert.ok(srv.frozen.has('srv_b') && srv.running.has('srv_b'), 'its stop failed: still there, frozen');
  // a peer first: nothing thawed that the fence tried to stop
  w.cut = undefined;
  await sf.tick();
  assert.ok(srv.frozen.has('srv_b'), 'kept frozen with only a peer answering');
  // the registry answers, the clean-up fails: kept frozen, tried again
  w.up = true;
  await sf.tick();
  assert.equal(healed, ['failed']);
  assert.ok(srv.frozen.has('srv_b'), 'kept frozen while the clean-up failed');
  assert.ok(sf.unsettled);
  fail = 'false'; // not done, said by its answer (hosting's dropMoved: false when the registry did not answer)
  await sf.tick();
  assert.equal(healed, ['failed', 'failed'], 'tried again');
  assert.ok(srv.frozen.has('srv_b') && sf.unsettled, 'still kept frozen');
  fail = undefined;
  await sf.tick();
  assert.equal(healed, ['failed', 'failed', 'done'], 'tried again');
  assert.not.ok(srv.frozen.has('srv_b'), 'thawed once the placements were read');
  const at = srv.calls.indexOf('thaw srv_b');
  assert.ok(at > srv.calls.lastIndexOf('healed'), `the clean-up before the thaw: ${srv.calls.join(', ')}`);
  await sf.tick();
  assert.equal(healed, ['failed', 'failed', 'done'], 'done once');
});

test("the clean-up (hosting's dropMoved) fails when it could not read the placements, so the fence tries it again", async () => {
  const d = { store: { servers: { all: () => [{ id: 'srv_a' }], get: () => ({ id: 'srv_a' }) } }, runtime: { get: () => undefined }, log };
  const names = {
    self: 'host-b',
    placementOf: async () => {
      throw new Error('registry unreachable');
    },
  };
  // not done: a throw, or false (either way the fence calls it again)
  assert.is(await dropMoved(d as never, names).catch(() => false), false);
});

test("the clean-up (hosting's dropMoved) leaves alone a server whose move's outcome the moves part settles (it removes that copy itself)", async () => {
  const d = { store: { servers: { all: () => [{ id: 'srv_a' }, { id: 'srv_b' }], get: (id: string) => ({ id }) } }, runtime: { get: () => undefined }, log };
  const read: string[] = [];
  const names = { self: 'host-b', placementOf: async (id: string) => void read.push(id) };
  assert.is(await dropMoved(d as never, names, undefined, (id) => id === 'srv_a'), true);
  assert.equal(read, ['srv_b'], 'srv_a neither read nor dropped here');
});

test('a daemon restarted while the fence stop is unsettled still starts and thaws nothing from what it alone knows, until the clean-up read the placements', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-fencerestart-'));
  try {
    // run 1: cut off past the stop bound, then a peer answers while the registry does not
    const { w, contact } = world();
    const srv = servers(['srv_a']);
    const sf = new SelfFence({ contact, servers: srv.s, recoverAfterMs: R, log, clock: noClock, settlement: new FenceSettlement(fenceStateFile(dataDir)) });
    w.up = false;
    w.cut = B.stopMs + 1;
    await sf.tick();
    assert.equal(srv.calls, ['stop srv_a']);
    w.cut = undefined;
    await sf.tick();
    assert.ok(sf.unsettled);
    assert.ok(existsSync(fenceStateFile(dataDir)), 'kept in the data dir');
    // the daemon restarts: the registry part made again on the same data dir, its heartbeat not
    // answered yet (its wake fence starts from what this host has) and no self-fence running yet
    const registry = () =>
      new Registry(
        {
          url: 'postgres://rootbox@127.0.0.1:9/rootbox', // never reached in this test
          host: 'host-b',
          advertise: '127.0.0.1:9',
          publicIp: '127.0.0.1',
          version: 'test',
          leaseMs: 3000,
          connectTimeoutMs: 200,
          statementTimeoutMs: 500,
          recoverAfterMs: R,
          dataDir,
          replaceHost: false,
          keys: new ClusterKeys(newToken()),
          capacity: () => ({}),
        },
        log,
      );
    const r = registry();
    try {
      assert.is(await code(r.fence.check('srv_a')), 'host_fenced', 'no start from what this host has after the restart');
      assert.throws(
        () => r.fence.checkThaw('srv_a'),
        (e: { code?: string }) => e.code === 'host_fenced',
        'no thaw either',
      );
      // its self-fence starts; the registry answers (its contact: reached): the clean-up owed runs at the first check
      let healed = 0;
      const again = servers([]);
      const sf2 = r.fenceServers(again.s, noClock, async () => void healed++);
      assert.ok(sf2.unsettled, 'the self-fence of the new run knows it too');
      await sf2.tick();
      assert.is(healed, 1, 'the clean-up ran at once');
      assert.not.ok(sf2.unsettled);
      assert.not.ok(existsSync(fenceStateFile(dataDir)), 'the mark removed once settled');
      assert.is(await code(r.fence.check('srv_a')), undefined, 'settled: starts as before');
      r.fence.checkThaw('srv_a');
    } finally {
      await r.stop();
    }
    const r3 = registry(); // and a restart after that starts settled
    try {
      assert.is(await code(r3.fence.check('srv_a')), undefined);
    } finally {
      await r3.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.run();
