// The fence that outlives the daemon (issue 38, review H1: src/runtime/fencewatch.ts), on the real
// cgroup freezer with real processes: a "server" is a process in the freezer cgroup a server of
// that id gets, the "daemon" a process the test kills. Bounds: frozen 500 ms after the last
// contact, killed after 1000 ms (a quarter and half of a recoverAfter of 2 s; the thaw's case
// kills later, so that only the thaw is timed).
//   - the daemon gone and its contact stale: the server is frozen after the freeze bound, and
//     every task of it killed after the stop bound; a server already frozen (a doze) is left frozen;
//     before the kill it marks the fence's stop unsettled for the next daemon (registry/fencestate.ts);
//   - the daemon alive: nothing, however stale its contact (its own fence acts);
//   - contact fresh again: what the watchdog froze is thawed;
//   - the file removed (a stop with nothing left running): the watchdog leaves;
//   - the unsettled mark, the watchdog's and the daemon's own fence's, is renamed into place and its
//     directory fsynced before the kill (strace: the syscalls themselves; a power loss cannot be
//     tested here).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FenceSettlement, fenceStateFile } from '../../src/registry/index.js';
import { cgroupPath, fenceCgroup, startFenceWatch, type FenceWatch, type Runtime } from '../../src/runtime/index.js';
import { watchFence } from '../../src/fencing.js';
import type { Config } from '../../src/config/index.js';
import type { Registry } from '../../src/registry/index.js';
import { until } from '../helpers/wait.js';

const FREEZE_MS = 500;
const STOP_MS = 1000;
const V2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
/** The daemon's runtime config: its nft table names its servers' cgroup parent. */
const RT = { nftTable: `rbfw${process.pid % 100000}` };
const dirs: string[] = [];
const procs: ChildProcess[] = [];
const tmp = mkdtempSync(join(tmpdir(), 'rbx-fencewatch-'));

const sleeper = () => {
  const p = spawn('sleep', ['300'], { stdio: 'ignore' });
  procs.push(p);
  return p;
};
const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
const frozen = (dir: string) =>
  V2 ? /^frozen 1$/m.test(readFileSync(join(dir, 'cgroup.events'), 'utf8')) : readFileSync(join(dir, 'freezer.state'), 'utf8').trim() === 'FROZEN';
const setFrozen = (dir: string, on: boolean) =>
  writeFileSync(join(dir, V2 ? 'cgroup.freeze' : 'freezer.state'), V2 ? (on ? '1' : '0') : on ? 'FROZEN' : 'THAWED');

/** A "server": a process in the cgroup a server of id `id` gets. */
function server(id: string): { dir: string; pid: number } {
  const dir = fenceCgroup(cgroupPath(RT, id));
  mkdirSync(dir, { recursive: true });
  dirs.push(dir);
  const p = sleeper();
  writeFileSync(join(dir, 'cgroup.procs'), String(p.pid));
  return { dir, pid: p.pid! };
}

/** strace attached to `pid` (and, with `children`, what it starts): its openat, fsync and renames
 *  with the paths of their fds (-y), until end(). */
async function strace(pid: number, children: boolean): Promise<{ end: () => Promise<string[]> }> {
  const log = join(tmp, `strace-${pid}-${Date.now()}`);
  const p = spawn('strace', [...(children ? ['-f'] : []), '-y', '-e', 'trace=openat,fsync,rename,renameat,renameat2', '-o', log, '-p', String(pid)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  procs.push(p);
  let err = '';
  p.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const gone = new Promise((r) => p.once('exit', r)); // also on its own, once what it traces is gone
  await until('strace attached', () => /attached/.test(err), 5000, 10);
  return {
    end: async () => {
      p.kill('SIGINT');
      await gone;
      return readFileSync(log, 'utf8').split('\n');
    },
  };
}

/** Whether the trace renames `<dir>/cluster-fence.json.tmp` over the mark and then fsyncs `dir`. */
function dirSyncedAfterRename(lines: string[], dir: string): boolean {
  const renamed = lines.findIndex((l) => /rename\w*\(.*cluster-fence\.json\.tmp".*cluster-fence\.json"/.test(l));
  return renamed >= 0 && lines.slice(renamed + 1).some((l) => l.includes(`fsync(`) && l.includes(`<${dir}>) = 0`));
}

function watch(name: string, daemonPid: number, stopMs = STOP_MS): { w: FenceWatch; dataDir: string } {
  const dataDir = join(tmp, name);
  mkdirSync(dataDir);
  return {
    w: startFenceWatch({
      dataDir,
      cgroup: (id) => cgroupPath(RT, id),
      freezeMs: FREEZE_MS,
      stopMs,
      everyMs: 50,
      daemonPid,
      settleFile: fenceStateFile(dataDir),
    }),
    dataDir,
  };
}

test.after(() => {
  for (const d of dirs) {
    if (!existsSync(d)) continue;
    setFrozen(d, false);
    for (const p of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) process.kill(Number(p), 'SIGKILL');
  }
  for (const p of procs) p.kill('SIGKILL');
  setTimeout(() => {
    for (const d of dirs) if (existsSync(d)) rmdirSync(d);
    if (dirs.length) rmdirSync(join(dirs[0], '..'));
    rmSync(tmp, { recursive: true, force: true });
  }, 200);
});

test('the daemon gone: its servers frozen at the freeze bound after the last contact and killed at the stop bound; a doze stays frozen', async () => {
  const tag = `fw${process.pid}a`;
  const s = server(`srv_${tag}1`);
  const dozing = server(`srv_${tag}2`);
  setFrozen(dozing.dir, true);
  await until('the doze frozen', () => frozen(dozing.dir), 2000, 10);
  const daemon = sleeper();
  const { w, dataDir } = watch('gone', daemon.pid!);
  const t0 = Date.now();
  w.beat(t0, [`srv_${tag}1`, `srv_${tag}2`]);
  daemon.kill('SIGKILL');
  await until('the server frozen', () => frozen(s.dir), 3000, 10);
  const frozeMs = Date.now() - t0;
  assert.ok(frozeMs >= FREEZE_MS, `frozen ${frozeMs} ms after the last contact`);
  assert.ok(alive(s.pid), 'frozen, not killed yet');
  assert.not.ok(existsSync(fenceStateFile(dataDir)), 'a freeze settles itself: no mark');
  await until('the server killed', () => !alive(s.pid), 3000, 10);
  const next = new FenceSettlement(fenceStateFile(dataDir)); // what the next daemon reads
  assert.ok(next.unsettled, 'the next daemon starts nothing before it read the placements');
  assert.is(next.since?.by, 'watchdog');
  const killedMs = Date.now() - t0;
  assert.ok(killedMs >= STOP_MS, `killed ${killedMs} ms after the last contact`);
  assert.ok(killedMs < 2 * STOP_MS, `killed ${killedMs} ms after the last contact, before recoverAfter`);
  await until('the watchdog leaves once it killed them', () => !alive(w.pid), 3000, 10);
  w.stop(false);
});

test('the daemon alive: nothing, however stale its contact; fresh contact thaws what the watchdog froze; the file gone, it leaves', async () => {
  const tag = `fw${process.pid}b`;
  const s = server(`srv_${tag}1`);
  const daemon = sleeper();
  const { w, dataDir } = watch('alive', daemon.pid!, 10 * STOP_MS); // a wide window between freeze and kill: the thaw is what is checked
  const t0 = Date.now();
  w.beat(t0, [`srv_${tag}1`]);
  await new Promise((r) => setTimeout(r, 2 * FREEZE_MS + 500));
  assert.not.ok(frozen(s.dir), 'the daemon lives: its own fence acts');
  assert.ok(alive(s.pid));
  w.beat(Date.now(), [`srv_${tag}1`]); // its last contact
  daemon.kill('SIGKILL');
  await until('frozen once the daemon is gone', () => frozen(s.dir), 3000, 10);
  w.beat(Date.now(), [`srv_${tag}1`]); // a daemon back in contact (here: the file as it writes it)
  await until('thawed', () => !frozen(s.dir), 3000, 10);
  assert.ok(alive(s.pid));
  w.stop(false);
  await until('the watchdog leaves', () => !alive(w.pid), 3000, 10);
  assert.ok(alive(s.pid), 'a stop with nothing left running kills nothing');
  assert.not.ok(existsSync(fenceStateFile(dataDir)), 'nothing killed: no unsettled mark');
});

test("a server the wake fence lets start is in the watchdog's file at once, before the next tick and before its container exists", async () => {
  const dataDir = join(tmp, 'starting');
  mkdirSync(dataDir);
  const file = join(dataDir, 'fence-watch');
  const listed = () => readFileSync(file, 'utf8').split('\n').slice(2);
  // the daemon (this process) in contact, nothing running: a tick every 100 ms lists nothing
  const r = { contact: { cutOffForMs: () => 0, wallNow: () => Date.now() } } as unknown as Registry;
  const rt = { list: () => [] } as unknown as Runtime;
  const cfg = { dataDir, runtime: RT, cluster: { recoverAfter: 2000 } } as unknown as Config;
  const f = watchFence(r, rt, cfg);
  try {
    assert.equal(listed().filter(Boolean), []);
    const id = `srv_fw${process.pid}s`;
    f.starting(id);
    // a kill -9 now: the watchdog would freeze and kill it with the rest
    assert.ok(listed().includes(fenceCgroup(cgroupPath(RT, id))), `listed at once: ${JSON.stringify(listed())}`);
  } finally {
    f.stop(false);
  }
  assert.not.ok(existsSync(file), 'a stop with nothing left running removes the file (the watchdog leaves)');
});

test("the unsettled mark is renamed into place and its directory fsynced before the kill: the watchdog's and the daemon fence's own", async () => {
  const tag = `fw${process.pid}c`;
  const s = server(`srv_${tag}1`);
  const daemon = sleeper();
  const { w, dataDir } = watch('durable', daemon.pid!, 2 * STOP_MS);
  const traced = await strace(w.pid, true);
  w.beat(Date.now(), [`srv_${tag}1`]);
  daemon.kill('SIGKILL');
  await until('the server killed', () => !alive(s.pid), 6000, 10);
  const lines = await traced.end();
  assert.ok(existsSync(fenceStateFile(dataDir)), 'marked');
  assert.ok(dirSyncedAfterRename(lines, dataDir), `the watchdog fsyncs ${dataDir} after the rename`);
  w.stop(false);

  const own = join(tmp, 'own');
  mkdirSync(own);
  const self = await strace(process.pid, false);
  new FenceSettlement(fenceStateFile(own)).stopping();
  const mine = await self.end();
  assert.ok(new FenceSettlement(fenceStateFile(own)).unsettled);
  assert.ok(dirSyncedAfterRename(mine, own), `stopping() fsyncs ${own} after the rename`);
});

test.run();
