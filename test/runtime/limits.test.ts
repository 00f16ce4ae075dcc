// The server's own limits in view, on real runc servers of a real daemon (which runs lxcfs):
// free/top//proc/meminfo show the memory ceiling, uptime and load are the server's, nproc and
// cpuinfo agree, /sys/fs/cgroup tells the server its limit and usage (read-only), df shows the
// server's disk and no host-sized mount; lxcfs is supervised (killed → restarted), left serving
// at stop while containers remain, and servers start without it (seeing the host's figures).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../src/log/index.js';
import { ContainerRuntime, Lxcfs, lxcfsState } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { MiB, newId, sh, startRuntime, waitFor } from './helpers/env.js';

let d: TestDaemon;
let rt: ContainerRuntime;
const id = newId('lim');
let createdAt = 0;

test.before(async () => {
  d = await startTestDaemon();
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  rt = d.daemon.runtime;
  createdAt = Date.now();
  await rt.create({ id, slug: 'lim-one', memoryBytes: 256 * MiB, diskBytes: 256 * MiB });
});
test.after(async () => {
  await d?.stop();
});

const out = async (script: string) => {
  const r = await sh(rt, id, script);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out;
};

test('free -m, top and /proc/meminfo show the 256 MiB ceiling, not the host memory', async () => {
  const total = Number(/^Mem:\s+(\d+)/m.exec(await out('free -m'))?.[1]);
  assert.ok(total >= 250 && total <= 256, `free -m total ${total}`);
  assert.match(await out('grep MemTotal /proc/meminfo'), /MemTotal:\s+262144 kB/);
  assert.match(await out('top -bn1 | head -5'), /MiB Mem :\s+256\.0 total/);
  assert.ok(totalmem() > 1024 * MiB, 'the host has more memory than the server, so the test can tell them apart');
});

test('uptime and /proc/uptime count from the server start; /proc/loadavg counts only its own tasks', async () => {
  const up = Number((await out('cat /proc/uptime')).split(' ')[0]);
  assert.ok(up >= 0 && up <= (Date.now() - createdAt) / 1000 + 5, `server uptime ${up} s, created ${(Date.now() - createdAt) / 1000} s ago`);
  assert.match(await out('uptime'), /up\s+(0 min|\d+ sec)/);
  const tasks = Number((await out('cat /proc/loadavg')).split(' ')[3].split('/')[1]);
  const hostTasks = Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[3].split('/')[1]);
  assert.ok(tasks < 50 && tasks < hostTasks, `loadavg tasks ${tasks} (host ${hostTasks})`);
});

test('nproc, /proc/cpuinfo and /proc/stat agree: the server may use every CPU of the host (cpu shares, no cpu limit), with its own usage', async () => {
  const n = Number(await out('nproc'));
  assert.is(n, cpus().length);
  assert.is(Number(await out('grep -c ^processor /proc/cpuinfo')), n);
  const busy = (stat: string) => {
    const f = /^cpu\s+(.*)$/m.exec(stat)![1].split(/\s+/).map(Number);
    return f[0] + f[1] + f[2];
  };
  const mine = busy(await out('cat /proc/stat'));
  assert.ok(mine < busy(readFileSync('/proc/stat', 'utf8')), "the server's cpu line is its own cgroup's time, not the host's");
});

test('/sys/fs/cgroup shows the server its own memory limit and usage, read-only', async () => {
  assert.is(Number(await out('cat /sys/fs/cgroup/memory/memory.limit_in_bytes')), 256 * MiB);
  assert.ok(Number(await out('cat /sys/fs/cgroup/memory/memory.usage_in_bytes')) > 0);
  assert.match(await out('cat /sys/fs/cgroup/memory/memory.oom_control'), /oom_kill \d+/);
  const w = await sh(rt, id, 'echo 1 > /sys/fs/cgroup/memory/memory.limit_in_bytes');
  assert.is.not(w.code, 0);
  assert.match(w.err, /Read-only file system/);
});

test("df / shows the server's disk (about 256 MB) with no host device, and df lists no host-sized tmpfs over masked paths or /sys/fs/cgroup", async () => {
  const root = (await out('df -k /')).trim().split('\n')[1].split(/\s+/);
  assert.is(root[0], 'overlay');
  assert.ok(Number(root[1]) > 200 * 1024 && Number(root[1]) <= 256 * 1024, `df / size ${root[1]} KiB`);
  const all = await out('df -k');
  assert.not.match(all, /\/proc\/acpi|\/sys\/firmware|\/sys\/fs\/cgroup/);
  assert.not.match(all, /(^|\n)\S+\s+\d+\s+\d+\s+\d+\s+\d+%\s+\/proc\//);
});

test('lxcfs killed is restarted by the daemon, and a server started afterwards sees its own memory again', async () => {
  const dir = join(d.dataDir, 'lxcfs');
  assert.is(lxcfsState(dir), 'serving');
  const pid = Number(readFileSync(join(d.dataDir, 'runtime', 'lxcfs.pid'), 'utf8'));
  process.kill(pid, 'SIGKILL');
  const newPid = () => Number(readFileSync(join(d.dataDir, 'runtime', 'lxcfs.pid'), 'utf8'));
  assert.ok(await waitFor(() => newPid() !== pid && lxcfsState(dir) === 'serving', 10_000), 'a new lxcfs serves');
  await rt.stop(id);
  await rt.start(id);
  assert.match(await out('grep MemTotal /proc/meminfo'), /MemTotal:\s+262144 kB/);
});

test("a server starts without lxcfs and then sees the host's figures", async () => {
  const env = await startRuntime('nolx', 93); // a runtime alone: no lxcfs part
  try {
    const other = newId('nolx');
    await env.rt.create({ id: other, slug: 'nolx', memoryBytes: 128 * MiB, diskBytes: 128 * MiB });
    const r = await sh(env.rt, other, 'grep MemTotal /proc/meminfo');
    assert.is(r.code, 0, r.err);
    assert.is(Number(/(\d+) kB/.exec(r.out)?.[1]) * 1024, Number(/MemTotal:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1]) * 1024);
  } finally {
    await env.cleanup();
  }
});

test('lxcfs stays serving at stop while containers remain, is reused by the next start, and is unmounted when none remain', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-lxcfs-'));
  try {
    const a = new Lxcfs({ dataDir, log: silentLogger });
    await a.start();
    const dir = join(dataDir, 'lxcfs');
    assert.is(lxcfsState(dir), 'serving');
    const pid = readFileSync(join(dataDir, 'runtime', 'lxcfs.pid'), 'utf8');
    mkdirSync(join(dataDir, 'runc', 'srv_still_running'), { recursive: true });
    await a.stop();
    assert.is(lxcfsState(dir), 'serving', 'a container remains: its /proc files stay served');
    const b = new Lxcfs({ dataDir, log: silentLogger });
    await b.start();
    assert.is(readFileSync(join(dataDir, 'runtime', 'lxcfs.pid'), 'utf8'), pid, 'the running instance is reused');
    rmSync(join(dataDir, 'runc'), { recursive: true });
    await b.stop();
    assert.is(lxcfsState(dir), 'absent');
    assert.ok(await waitFor(() => !alive(Number(pid)), 3000), 'lxcfs ended');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

function alive(pid: number): boolean {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
}

test.run();
