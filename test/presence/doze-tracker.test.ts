// The idle tracker's doze over the process runtime (real processes, SIGSTOP/SIGCONT; no root):
// an idle server is frozen (its process in state T) and shown as sleeping, wake() and a touch
// thaw it without a start, and the memory floor stops dozing servers LRU first, as many as needed
// (host memory given by the test here; the container test drives it with a real hog).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createLogger } from '../../src/log/index.js';
import { IdleTracker } from '../../src/presence/index.js';
import { hostMemAvailable, victims } from '../../src/presence/floor.js';
import { MemoryFloor } from '../../src/presence/release.js';
import { ProcessRuntime, freePort } from '../helpers/procruntime.js';

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const procState = (pid: number) => /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1];

test('victims: least recently used first, connected ones last, only as many as the missing memory', () => {
  const d = (id: string, last: number, mb: number, connected = false) => ({ id, last, memoryBytes: mb * MiB, connected });
  const all = [d('c', 3, 100), d('a', 1, 100), d('b', 2, 100), d('held', 0, 500, true)];
  assert.equal(victims(all, 0), []);
  assert.equal(victims(all, 50 * MiB), ['a']);
  assert.equal(victims(all, 150 * MiB), ['a', 'b']);
  assert.equal(victims(all, 350 * MiB), ['a', 'b', 'c', 'held']);
});

test('a process server dozes (SIGSTOP, sleeping), wake() and touch() thaw it with no start, the floor stops the LRU one', async () => {
  const rt = new ProcessRuntime();
  const ids = ['srv_a', 'srv_b'];
  for (const id of ids) rt.add(id, id.slice(4), '/nonexistent', await freePort());
  let avail = 10_000 * MiB;
  const t = new IdleTracker({
    runtime: rt,
    neverSleep: () => false,
    idleTimeout: 100,
    checkInterval: 20,
    dozeTimeout: 60_000,
    memoryFloor: 1000 * MiB,
    memAvailable: () => avail + ids.filter((id) => rt.get(id)?.state === 'sleeping').length * 100 * MiB, // a stop frees memory
    floorInterval: 20,
    log: createLogger({ level: 'error', sink: () => {} }),
  });
  t.start();
  try {
    for (const id of ids) {
      await t.wake(id);
      await sleep(5);
    }
    assert.is(rt.starts, 2);
    const pid = rt.servers.get('srv_a')!.child!.pid!;
    await sleep(400);
    assert.ok(t.isDozing('srv_a') && t.isDozing('srv_b'));
    assert.is(t.state('srv_a'), 'sleeping');
    assert.is(procState(pid), 'T', 'its process is stopped');
    await t.wake('srv_a');
    assert.is.not(procState(pid), 'T', 'running again');
    assert.is(rt.starts, 2, 'no start');
    assert.is(t.state('srv_a'), 'running');
    await sleep(400);
    assert.ok(t.isDozing('srv_a'));
    t.touch('srv_a'); // e.g. a byte on a quiet WebSocket
    await sleep(20);
    assert.not.ok(t.isDozing('srv_a'));
    await sleep(400); // both doze again; srv_b is now the least recently used
    avail = 999 * MiB;
    await sleep(200);
    assert.is(rt.get('srv_b')?.state, 'sleeping', 'the LRU one stopped');
    assert.ok(t.isDozing('srv_a'), 'one was enough');
  } finally {
    t.stop();
    await rt.stopAll();
  }
});

test('the floor waits for a stopped server memory to show before it stops another (settle window), then goes on LRU', async () => {
  const rt = new ProcessRuntime();
  const ids = ['srv_a', 'srv_b', 'srv_c'];
  for (const id of ids) rt.add(id, id.slice(4), '/nonexistent', await freePort());
  let avail = 10_000 * MiB;
  const t = new IdleTracker({
    runtime: rt,
    neverSleep: () => false,
    idleTimeout: 100,
    checkInterval: 20,
    dozeTimeout: 60_000,
    memoryFloor: 1000 * MiB,
    memAvailable: () => avail, // a stop's memory never shows: only the settle window ends the wait
    floorInterval: 20,
    floorSettle: 1000,
    log: createLogger({ level: 'error', sink: () => {} }),
  });
  t.start();
  const asleep = () => ids.filter((id) => rt.get(id)?.state === 'sleeping');
  try {
    for (const id of ids) {
      await t.wake(id);
      await sleep(5);
    }
    const end = Date.now() + 5000;
    while (!ids.every((id) => t.isDozing(id)) && Date.now() < end) await sleep(20);
    assert.ok(
      ids.every((id) => t.isDozing(id)),
      'all three doze',
    );
    avail = 999 * MiB;
    while (asleep().length === 0 && Date.now() < end) await sleep(10);
    assert.equal(asleep(), ['srv_a'], 'the LRU one first');
    await sleep(300); // many floor checks within the settle window
    assert.equal(asleep(), ['srv_a'], 'no second stop while the memory of the first may still be coming');
    const end2 = Date.now() + 5000;
    while (asleep().length < 2 && Date.now() < end2) await sleep(20);
    assert.equal(asleep(), ['srv_a', 'srv_b'], 'still short after the settle window: the next LRU one');
    assert.ok(t.isDozing('srv_c'));
  } finally {
    t.stop();
    await rt.stopAll();
  }
});

/** /proc/meminfo and /proc/zoneinfo as a 6.x kernel writes them (trimmed): MemAvailable in kB,
 *  and per CPU a pageset whose `count` is free pages on that CPU's list. */
const meminfo = (availKb: number) => `MemTotal:       24683656 kB\nMemFree:        17426620 kB\nMemAvailable:   ${availKb} kB\nBuffers:          123 kB\n`;
const zoneinfo = (counts: number[]) =>
  `Node 0, zone   Normal\n  pages free     2515583\n        min      14479\n  pagesets\n` +
  counts
    .map((c, cpu) => `    cpu: ${cpu}\n              count:    ${c}\n              high:     48556\n              batch:    63\n  vm stats threshold: 36\n`)
    .join('') +
  `  node_unreclaimable:  0\n  start_pfn:           1048576\n`;

test("hostMemAvailable: MemAvailable plus the free pages on the per-CPU lists (where an exited process's pages land first)", () => {
  const files: Record<string, string> = { '/proc/meminfo': meminfo(1000 * 1024), '/proc/zoneinfo': zoneinfo([25600, 12800]) };
  const read = (path: string) => {
    if (!(path in files)) throw new Error(`ENOENT ${path}`);
    return files[path]!;
  };
  assert.is(hostMemAvailable(read, 4096), 1000 * MiB + 150 * MiB, "MemAvailable and both CPUs' lists (100 + 50 MiB of 4 KiB pages)");
  assert.is(hostMemAvailable(read, 65536), 1000 * MiB + 38400 * 65536, "pages of the kernel's size");
  delete files['/proc/zoneinfo'];
  assert.is(hostMemAvailable(read, 4096), 1000 * MiB, 'no zoneinfo: MemAvailable alone');
  delete files['/proc/meminfo'];
  assert.is(hostMemAvailable(read, 4096), Infinity, 'nothing readable: no floor stop for it');
});

test("the floor does not stop a second server while the first one's freed pages sit on the per-CPU lists (MemAvailable shows them only seconds later)", async () => {
  const rt = new ProcessRuntime();
  const ids = ['srv_a', 'srv_b', 'srv_c'];
  for (const id of ids) rt.add(id, id.slice(4), '/nonexistent', await freePort());
  // a kernel of 6.7+: a stopped server's 100 MiB go to the per-CPU lists at once and drain into
  // MemAvailable 2 s later (here in one go); before the hog MemAvailable is well above the floor.
  // The tracker's clock is the test's, and the test runs its checks (no timers).
  let clock = 1_000_000;
  const stoppedAt = new Map<string, number>();
  const stop = rt.stop.bind(rt);
  rt.stop = async (id: string) => (await stop(id), void stoppedAt.set(id, clock));
  let availKb = 10_000 * 1024;
  const drained = () => [...stoppedAt.values()].filter((t) => clock - t >= 2000).length;
  const onLists = () => stoppedAt.size - drained();
  const read = (path: string) => (path === '/proc/meminfo' ? meminfo(availKb + drained() * 100 * 1024) : zoneinfo([onLists() * 25600, 0]));
  const decisions: string[][] = [];
  const t = new IdleTracker({
    runtime: rt,
    neverSleep: () => false,
    idleTimeout: 100,
    checkInterval: 20,
    dozeTimeout: 60_000,
    memoryFloor: 1000 * MiB,
    memAvailable: () => hostMemAvailable(read, 4096),
    floorSettle: 300,
    now: () => clock,
    log: createLogger({
      level: 'info',
      sink: (line) => {
        const l = JSON.parse(line) as { msg: string; servers?: string[] };
        if (l.msg === 'memory floor: dozing servers stop') decisions.push(l.servers!);
      },
    }),
  });
  const asleep = () => ids.filter((id) => rt.get(id)?.state === 'sleeping');
  const settled = async (what: string, cond: () => boolean) => {
    const end = Date.now() + 5000;
    while (!cond() && Date.now() < end) await sleep(5);
    assert.ok(cond(), what);
  };
  try {
    for (const id of ids) {
      await t.wake(id);
      clock += 5; // A touched first: least recently used
    }
    // each app's node process past its start (a dozing server counts what it held at the freeze: one
    // frozen in its first milliseconds, a few MiB, would not cover the 10 MiB and a second stop would follow)
    for (const id of ids) for (const end = Date.now() + 10_000; (await rt.stats(id)).memoryBytes < 20 * MiB && Date.now() < end;) await sleep(5);
    clock += 200;
    t.check();
    await settled('all three doze', () => ids.every((id) => t.isDozing(id)));
    availKb = 990 * 1024; // 10 MiB below the floor: one stop (100 MiB) covers it
    t.checkFloor();
    assert.equal(decisions, [['srv_a']], 'the LRU one first, alone');
    await settled('A stopped', () => asleep().length === 1);
    assert.equal(asleep(), ['srv_a']);
    for (let i = 0; i < 10; i++) {
      clock += 100; // settle window (300 ms) long over, the freed pages still on the lists
      t.checkFloor();
    }
    assert.equal(
      decisions,
      [['srv_a']],
      `no second stop: its memory is back, on the per-CPU lists (MemAvailable ${hostMemAvailable(read, 4096) / MiB} MiB with them)`,
    );
    for (let i = 0; i < 15; i++) {
      clock += 100; // drained into MemAvailable
      t.checkFloor();
    }
    assert.is(drained(), 1);
    assert.equal(decisions, [['srv_a']], 'nor once MemAvailable shows it');
    assert.equal(asleep(), ['srv_a']);
    assert.ok(t.isDozing('srv_b') && t.isDozing('srv_c'));
  } finally {
    t.stop();
    await rt.stopAll();
  }
});

test('the floor bookkeeping: a stop under way counts its memory as coming however long it takes, host memory moving for other reasons neither hides nor doubles it', () => {
  let avail = 940 * MiB; // 60 MiB below the floor
  let now = 0;
  const runtime = { parked: () => [], unpark: async () => false };
  const f = new MemoryFloor({
    runtime,
    memoryFloor: 1000 * MiB,
    memAvailable: () => avail,
    floorSettle: 1500,
    now: () => now,
    log: createLogger({ level: 'error', sink: () => {} }),
  });
  assert.is(f.missing(), 60 * MiB);
  const a = f.stopping('a', 160 * MiB);
  assert.is(f.missing(), -100 * MiB, "A's 160 MiB cover the 60 missing");
  avail += 300 * MiB; // another process exits while A's stop runs
  assert.is(f.missing(), -240 * MiB, 'the host above the floor: nothing asked');
  avail -= 300 * MiB + 50 * MiB; // ... and something else takes 50 MiB
  assert.is(f.missing(), -50 * MiB, 'the host is short by 110, A brings 160');
  now = 60_000; // a stop of a frozen container that takes a minute under load
  assert.is(f.missing(), -50 * MiB, 'still counted while it runs');
  avail += 160 * MiB; // its processes gone: the memory is back
  f.stopped(a);
  assert.is(f.missing(), -100 * MiB, 'within the settle window the 50 MiB taken meanwhile look like memory still coming');
  now += 1500;
  assert.is(f.missing(), -50 * MiB, 'then the host as it is');
  assert.not.ok(f.isReleasing('a'));
  const b = f.stopping('b', 160 * MiB);
  f.stopped(b); // its memory does not show (the estimate was too high, or it shows late)
  now += 1000;
  assert.is(f.missing(), -210 * MiB, 'counted within the settle window');
  now += 500;
  assert.is(f.missing(), -50 * MiB, 'then the host as it is');
  avail += 500 * MiB;
  const c = f.stopping('c', 160 * MiB);
  avail += 160 * MiB;
  f.stopped(c);
  assert.is(f.missing(), -710 * MiB);
  assert.not.ok(f.isReleasing('c'), 'all shown: nothing more to wait for');
  assert.is(f.reading().floor, 1000 * MiB);
  f.bytes = 0;
  assert.is(f.missing(), 0, 'no floor');
});

test.run();
