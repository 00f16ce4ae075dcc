// When a host is dead and when a host fences itself (issue 38: src/registry/deadhost.ts, contact.ts,
// selffence.ts), on injected time: dead only when the lease has lapsed for recoverAfter AND no
// answer on the channel for as long (a host cut off from the registry alone is not dead); 0 is
// never. A host cut off from the registry and every peer freezes its running servers after a
// quarter of recoverAfter and stops them after half (real processes of the process runtime:
// SIGSTOP, then killed), refuses starts meanwhile, and thaws what it froze once a peer answers;
// one whose peers still answer (a registry outage everyone sees) keeps serving.
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createLogger } from '../../src/log/index.js';
import { fencedServers } from '../../src/fencing.js';
import { Contact, SelfFence, assertNotCutOff, fenceStep, verdict, type HostContact, type SavedContact } from '../../src/registry/index.js';
import type { HostView } from '../../src/registry/index.js';
import { ManualClock } from '../helpers/clock.js';
import { ProcessRuntime } from '../helpers/procruntime.js';

const R = 120_000;
const c = (leaseLapsedForMs: number | undefined, silentForMs: number | undefined): HostContact => ({ leaseLapsedForMs, silentForMs });

test('dead only when the lease has lapsed for recoverAfter and the channel was silent for as long', () => {
  assert.equal(verdict(c(R, R), R), { dead: true });
  assert.equal(verdict(c(10 * R, R + 1), R), { dead: true });
  assert.equal(verdict(c(undefined, 10 * R), R), { dead: false, why: 'lease' }, 'a lease that runs: alive whatever the channel says');
  assert.equal(verdict(c(10 * R, undefined), R), { dead: false, why: 'channel' }, 'cut off from the registry alone, answering its peers: not dead');
  assert.equal(verdict(c(R - 1, 10 * R), R), { dead: false, why: 'waiting', inMs: 1 });
  assert.equal(verdict(c(10 * R, R - 500), R), { dead: false, why: 'waiting', inMs: 500 }, 'heard on the channel a moment ago');
  assert.equal(verdict(c(10 * R, 10 * R), 0), { dead: false, why: 'never' }, 'recoverAfter 0: never automatically');
});

test('the self-fence step: serve, freeze after a quarter of recoverAfter cut off, stop after half; never without peers or with recoverAfter 0', () => {
  assert.is(fenceStep(undefined, R, true), 'serve');
  assert.is(fenceStep(R / 4 - 1, R, true), 'serve');
  assert.is(fenceStep(R / 4, R, true), 'freeze');
  assert.is(fenceStep(R / 2 - 1, R, true), 'freeze');
  assert.is(fenceStep(R / 2, R, true), 'stop');
  assert.is(fenceStep(10 * R, R, false), 'serve', 'a lone host: nobody would recover its servers');
  assert.is(fenceStep(10 * R, 0, true), 'serve');
});

/** The world as a host sees it: the hosts listed, which answer on the channel, the registry. */
function world(start = 0) {
  const w = {
    t: start,
    registryUp: true,
    hosts: [] as HostView[],
    answering: new Set<string>(),
    /** What each answering peer says of its own registry contact (CONTACT_ASK), ms ago. */
    vouch: new Map<string, number>(),
    probes: [] as string[],
  };
  const host = (name: string, lease: boolean): HostView => ({
    name,
    advertise: `${name}:7946`,
    publicIp: '10.0.0.1',
    lease,
    up: lease || w.answering.has(name),
  });
  const contact = new Contact({
    self: 'a',
    hosts: () => w.hosts.map((h) => host(h.name, h.lease)),
    answers: (h) => w.answering.has(h),
    probe: (h) => void w.probes.push(h),
    registryAgo: (h) => (w.answering.has(h) ? w.vouch.get(h) : undefined),
    registryUp: () => w.registryUp,
    now: () => w.t,
    recoverAfterMs: R,
  });
  return { w, host, contact };
}

test('contact: a host whose lease lapsed is dead after recoverAfter of silence, counted from when it was first seen lapsed; one that answers is not', () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true), host('c', true)];
  w.answering.add('b').add('c');
  contact.tick();
  w.t = 5000;
  w.hosts = [host('a', true), host('b', false), host('c', false)]; // both leases lapse now
  w.answering.delete('b'); // b is gone; c is cut off from the registry alone
  contact.tick();
  assert.ok(w.probes.includes('b'), 'a host that does not answer is probed on the channel');
  assert.not.ok(w.probes.includes('c'), 'one that answers is not');
  w.t = 5000 + R - 1;
  contact.tick();
  assert.equal(contact.verdict('b'), { dead: false, why: 'waiting', inMs: 1 });
  w.t = 5000 + R;
  contact.tick();
  assert.equal(contact.verdict('b'), { dead: true });
  w.probes.length = 0;
  contact.tick();
  assert.not.ok(w.probes.includes('b'), 'a dead host is not probed again while the registry answers');
  assert.equal(contact.verdict('c'), { dead: false, why: 'channel' }, 'still answering its peers: not dead, still forwarded to');
  assert.equal(contact.verdict('a'), { dead: false, why: 'channel' }, 'this host never judges itself dead');
  // c stops answering too: silent from the last answer on, dead recoverAfter later
  w.answering.delete('c');
  const silentFrom = w.t;
  w.t += R - 1;
  contact.tick();
  assert.is(contact.verdict('c').dead, false);
  w.t = silentFrom + R;
  assert.is(contact.verdict('c').dead, true);
  // b renews its lease: alive again at once
  w.hosts = [host('a', true), host('b', true), host('c', false)];
  contact.tick();
  assert.equal(contact.verdict('b'), { dead: false, why: 'lease' });
});

test('contact: a host just started judges nobody dead before recoverAfter of its own', () => {
  const { w, host, contact } = world(1_000_000);
  w.hosts = [host('a', true), host('b', false)];
  contact.tick();
  w.t += R - 1;
  contact.tick();
  assert.is(contact.verdict('b').dead, false);
  w.t += 1;
  assert.is(contact.verdict('b').dead, true);
});

test('contact: cut off is neither the registry nor any peer, counted from the last of either; peers probed while the registry is away', () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true)];
  contact.tick();
  assert.is(contact.cutOffForMs(), undefined);
  w.t = 1000;
  w.registryUp = false;
  w.answering.add('b');
  contact.tick();
  assert.is(contact.cutOffForMs(), undefined, 'a peer answers: a registry outage everyone sees');
  assert.ok(contact.knowsPeers());
  w.t = 3000;
  contact.tick(); // b heard at 3000
  w.answering.delete('b');
  w.probes.length = 0;
  w.t = 4000;
  contact.tick();
  assert.ok(w.probes.includes('b'), 'while the registry is away every peer is probed');
  assert.is(contact.cutOffForMs(), 1000, 'cut off since b last answered');
  // b's lease lapsed before this host lost the registry, but it answered then: still a peer that
  // could recover this host's servers, however long this host stays cut off
  w.hosts = [host('a', true), host('b', false)];
  w.t = 10 * R;
  contact.tick();
  assert.ok(contact.knowsPeers(), 'the peers it had are not forgotten while cut off');
  assert.is(contact.cutOffForMs(), 10 * R - 3000);
});

test('contact: a minority {a, b} cut off from the registry and from c (which has it) fences although a and b answer each other; a peer that reached the registry vouches', () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true), host('c', true)];
  w.answering.add('b').add('c');
  contact.tick();
  // the split: {registry, c} | {a, b}; b answers a but reaches the registry no more than a does
  w.t = 1000;
  w.registryUp = false;
  w.answering.delete('c');
  contact.tick();
  w.t = R / 4; // counted from the last heartbeat that reached the registry, at 0
  contact.tick();
  assert.is(contact.cutOffForMs(), R / 4, 'b answering is no contact: it vouches for nothing');
  assert.is(fenceStep(contact.cutOffForMs(), R, contact.knowsPeers()), 'freeze');
  w.t = R / 2;
  contact.tick();
  assert.is(fenceStep(contact.cutOffForMs(), R, contact.knowsPeers()), 'stop', 'stopped by half of recoverAfter, before c may count a dead');
  // b reaches the registry again (its heartbeat says a is reached): its word is a's contact
  w.vouch.set('b', 300);
  contact.tick();
  assert.is(contact.cutOffForMs(), 300);
  assert.is(fenceStep(contact.cutOffForMs(), R, contact.knowsPeers()), 'serve');
  // b's word ages like any contact once it stops answering
  w.answering.delete('b');
  w.t += R / 4;
  contact.tick();
  assert.is(contact.cutOffForMs(), R / 4 + 300);
});

test('contact: a registry outage everyone sees keeps serving while every host that could recover this one answers; counted from the last moment all did', () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true), host('c', true), host('gone', false)];
  w.answering.add('b').add('c');
  contact.tick();
  w.registryUp = false;
  for (w.t = 1000; w.t <= 10 * R; w.t += R / 8) {
    contact.tick();
    assert.is(contact.cutOffForMs(), undefined, 'b and c answer, none reaches the registry: nobody can recover anything');
  }
  const allAt = w.t - R / 8;
  w.answering.delete('c'); // c no longer answers: it may be on the registry's side now
  contact.tick();
  assert.is(contact.cutOffForMs(), w.t - allAt);
  w.t = allAt + R / 4;
  contact.tick();
  assert.is(fenceStep(contact.cutOffForMs(), R, contact.knowsPeers()), 'freeze');
});

test('contact: what this host vouches for a peer — how long ago it reached the registry having heard it', () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true)];
  assert.is(contact.vouchAgo('b'), undefined, 'never heard');
  w.answering.add('b');
  contact.tick();
  assert.is(contact.vouchAgo('b'), 0);
  w.t = 2000;
  w.registryUp = false;
  contact.tick(); // b heard at 2000, the registry last reached at 0
  assert.is(contact.vouchAgo('b'), 2000);
  w.registryUp = true;
  w.answering.delete('b');
  w.t = 5000;
  contact.tick(); // the registry at 5000, b last heard at 2000
  assert.is(contact.vouchAgo('b'), 3000);
});

const log = createLogger({ level: 'error', sink: () => {} });

test('contact across a restart: the last contact and the peers are kept; a host restarted while cut off counts from that contact, not from its start', () => {
  let kept: SavedContact | undefined;
  const saved = { load: () => kept, save: (x: SavedContact) => void (kept = x) };
  let t = 0;
  let wall = 1_000_000;
  let registryUp = true;
  let hosts: HostView[] = [
    { name: 'a', advertise: 'a:1', publicIp: '', up: true, lease: true },
    { name: 'b', advertise: 'b:1', publicIp: '', up: true, lease: true },
  ];
  const answering = new Set<string>();
  const probes: string[] = [];
  const make = () =>
    new Contact({
      self: 'a',
      hosts: () => hosts,
      answers: (h) => answering.has(h),
      probe: (h) => void probes.push(h),
      registryUp: () => registryUp,
      now: () => t,
      wallNow: () => wall,
      recoverAfterMs: R,
      saved,
    });
  const first = make();
  first.tick();
  assert.equal(kept, { at: 1_000_000, peers: [{ name: 'b', advertise: 'b:1' }] }, 'kept on contact with the registry');
  t += 1000;
  wall += 1000;
  first.tick();
  assert.is(kept!.at, 1_000_000, 'not written again within recoverAfter/8');
  // down for recoverAfter, then started again cut off: the registry unreachable, no host listed yet
  t = 5;
  wall += R;
  registryUp = false;
  hosts = [];
  const again = make();
  assert.ok(again.knowsPeers(), 'the peers the last run had');
  assert.ok(again.cutOffForMs()! >= R, `cut off since the last run's contact: ${again.cutOffForMs()} ms`);
  try {
    assertNotCutOff(again, R, log, 'srv_1');
    assert.unreachable('a start while cut off past the bound');
  } catch (e) {
    assert.is((e as { code?: string }).code, 'host_fenced');
  }
  again.tick();
  assert.ok(probes.includes('b'), 'the saved peer is probed');
  answering.add('b'); // a registry outage everyone sees: the peer answers
  again.tick();
  assert.is(again.cutOffForMs(), undefined);
  assertNotCutOff(again, R, log, 'srv_1');
});

test('contact: a heartbeat that hangs (the registry cut off, the statement not timed out yet) is no contact once the lease the last one wrote lapsed: cut off from then', () => {
  const r = 8000;
  const w = { t: 0, up: true, reachedAt: 0 as number | undefined };
  const view = (name: string): HostView => ({ name, advertise: `${name}:7946`, publicIp: '10.0.0.1', lease: true, up: true });
  const contact = new Contact({
    self: 'a',
    hosts: () => [view('a'), view('b')],
    answers: () => false,
    registryUp: () => w.up,
    registryReachedAt: () => w.reachedAt,
    leaseMs: 3000,
    now: () => w.t,
    recoverAfterMs: r,
  });
  // heartbeats every second reach the registry (each writes a lease of 3 s), the last one started at 9 s
  for (; w.t <= 9000; w.t += 250) {
    if (w.t % 1000 === 0) w.reachedAt = w.t;
    contact.tick();
    assert.is(contact.cutOffForMs(), undefined, `in touch at ${w.t} ms`);
  }
  // the one due at 10 s hangs until its statement times out at 17 s: the last heartbeat still says up
  w.t = 11_000;
  contact.tick();
  assert.is(contact.cutOffForMs(), undefined, 'the lease the last heartbeat wrote still runs');
  w.t = 14_000;
  contact.tick();
  assert.is(contact.cutOffForMs(), 2000, 'cut off since that lease lapsed at 12 s');
  assert.is(fenceStep(contact.cutOffForMs(), r, contact.knowsPeers()), 'freeze', 'frozen a quarter of recoverAfter after it');
  w.t = 16_000;
  contact.tick();
  assert.is(fenceStep(contact.cutOffForMs(), r, contact.knowsPeers()), 'stop', 'stopped at half of it, before the statement timed out');
  w.t = 17_000;
  w.up = false; // the statement timed out
  contact.tick();
  assert.is(contact.cutOffForMs(), 5000, 'still counted from when the lease lapsed');
  // the registry answers again
  w.t = 18_000;
  w.up = true;
  w.reachedAt = 18_000;
  contact.tick();
  assert.is(contact.cutOffForMs(), undefined);
});

/** A process's state letter in /proc (T: stopped by SIGSTOP). */
function procState(pid: number): string {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2, s.lastIndexOf(')') + 3);
}

async function fenced(peers: boolean) {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true)];
  const clock = new ManualClock(0);
  const rt = new ProcessRuntime();
  const fence = new SelfFence({ contact, servers: fencedServers(rt), recoverAfterMs: R, log, clock, everyMs: 1000 });
  // the start guard as main.ts wires it: the self-fence first
  const guarded = new ProcessRuntime({ mayStart: async (id) => fence.check(id) });
  for (const id of ['srv_1', 'srv_2']) await rt.create({ id, slug: id, memoryBytes: 1, diskBytes: 1 });
  await rt.create({ id: 'srv_dozing', slug: 'dozing', memoryBytes: 1, diskBytes: 1 });
  await rt.freeze('srv_dozing'); // a doze of presence: not the fence's to thaw
  fence.start();
  /** Moves both clocks by `ms`, a second at a time, each check settled. */
  const advance = async (ms: number) => {
    for (let i = 0; i < ms / 1000; i++) {
      w.t += 1000;
      clock.advance(1000);
      await fence.tick();
    }
  };
  await advance(1000);
  w.registryUp = false;
  if (peers) w.answering.add('b');
  return { w, rt, guarded, fence, advance };
}

/** The state letter once it is `want` (a signal lands a moment after it is sent), or the last read after 5 s. */
async function stateOf(pid: number, want: string): Promise<string> {
  let s = procState(pid);
  for (let i = 0; i < 500 && s !== want; i++) {
    await new Promise((r) => setTimeout(r, 10));
    s = procState(pid);
  }
  return s;
}

const pid = (rt: ProcessRuntime, id: string) => rt.servers.get(id)!.child!.pid!;

test('self-fence: cut off from the registry and every peer, running servers are frozen after recoverAfter/4 and stopped after recoverAfter/2; starts refused', async () => {
  const { rt, guarded, fence, advance } = await fenced(false);
  const p1 = pid(rt, 'srv_1');
  await advance(R / 4 - 2000);
  assert.is(fence.now, 'serve');
  assert.is.not(procState(p1), 'T', 'still running just before a quarter of recoverAfter');
  await advance(2000);
  assert.is(fence.now, 'freeze');
  assert.is(await stateOf(p1, 'T'), 'T', 'frozen (SIGSTOP) after a quarter of recoverAfter');
  assert.is(await stateOf(pid(rt, 'srv_2'), 'T'), 'T');
  assert.is(fence.freezes, 2, 'the dozing server is not frozen again');
  await guarded.create({ id: 'srv_g', slug: 'g', memoryBytes: 1, diskBytes: 1 });
  await guarded.stop('srv_g');
  try {
    await guarded.start('srv_g');
    assert.unreachable('a start while fenced');
  } catch (e) {
    assert.is((e as { code?: string }).code, 'host_fenced');
  }
  await advance(R / 4);
  assert.is(fence.now, 'stop');
  assert.equal(
    rt.list().map((s) => [s.id, s.state]),
    [
      ['srv_1', 'sleeping'],
      ['srv_2', 'sleeping'],
      ['srv_dozing', 'sleeping'],
    ],
    'every running server stopped by half of recoverAfter, the dozing one too',
  );
  fence.stop();
});

test('self-fence: what it froze thaws once a peer answers again; a doze of presence stays frozen', async () => {
  const { w, rt, fence, advance } = await fenced(false);
  await advance(R / 4 + 1000);
  assert.is(await stateOf(pid(rt, 'srv_1'), 'T'), 'T');
  w.answering.add('b');
  await advance(1000);
  assert.is(fence.now, 'serve');
  assert.is.not(procState(pid(rt, 'srv_1')), 'T', 'thawed');
  assert.is.not(procState(pid(rt, 'srv_2')), 'T');
  assert.is(await stateOf(pid(rt, 'srv_dozing'), 'T'), 'T', 'a doze is not the fence’s');
  for (const id of ['srv_1', 'srv_2', 'srv_dozing']) await rt.stop(id);
  fence.stop();
});

test('self-fence: a peer answering first ends the fence, and the registry reached later still gets the stale copies checked (healed) once', async () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true)];
  const clock = new ManualClock(0);
  const rt = new ProcessRuntime();
  await rt.create({ id: 'srv_1', slug: 'one', memoryBytes: 1, diskBytes: 1 });
  let healed = 0;
  const fence = new SelfFence({ contact, servers: fencedServers(rt), recoverAfterMs: R, log, clock, everyMs: 1000, healed: async () => void healed++ });
  const advance = async (ms: number) => {
    for (let i = 0; i < ms / 1000; i++) {
      w.t += 1000;
      clock.advance(1000);
      await fence.tick();
    }
  };
  fence.start();
  await advance(1000);
  w.registryUp = false;
  await advance(R / 2 + 1000);
  assert.is(fence.now, 'stop');
  assert.is(rt.get('srv_1')?.state, 'sleeping');
  // the partition heals: the channel answers a moment before the registry does
  w.answering.add('b');
  await advance(1000);
  assert.is(fence.now, 'serve');
  assert.is(healed, 0, 'not yet: the registry (where the placements are) is not reached');
  w.registryUp = true;
  await advance(3000);
  assert.is(healed, 1, 'once the registry is reached, after the fence');
  fence.stop();
});

test('self-fence: recoverAfter 0 (never recovered automatically) fences nothing, but still reads the contact', async () => {
  const { w, host, contact } = world();
  w.hosts = [host('a', true), host('b', true)];
  const clock = new ManualClock(0);
  const rt = new ProcessRuntime();
  await rt.create({ id: 'srv_1', slug: 'one', memoryBytes: 1, diskBytes: 1 });
  const fence = new SelfFence({ contact, servers: fencedServers(rt), recoverAfterMs: 0, log, clock });
  fence.start();
  w.answering.add('b');
  w.t = 1000;
  clock.advance(1000);
  assert.equal(contact.heardAgo(), { b: 0 }, 'the contact read on the timer');
  w.answering.delete('b');
  w.registryUp = false;
  for (let i = 0; i < 10; i++) {
    w.t += R;
    clock.advance(R);
    await fence.tick();
  }
  assert.is(fence.now, 'serve');
  assert.is(rt.get('srv_1')?.state, 'running');
  assert.is.not(procState(pid(rt, 'srv_1')), 'T');
  await rt.stop('srv_1');
  fence.stop();
});

test('self-fence: a registry outage everyone sees (a peer still answers) keeps every server running', async () => {
  const { rt, fence, advance } = await fenced(true);
  await advance(R);
  assert.is(fence.now, 'serve');
  assert.is.not(procState(pid(rt, 'srv_1')), 'T');
  assert.is(fence.freezes + fence.stops, 0);
  for (const id of ['srv_1', 'srv_2', 'srv_dozing']) await rt.stop(id);
  fence.stop();
});

test.run();
