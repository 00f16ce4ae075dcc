// Runtime benchmark with real runc servers (own bridge/subnet/table, temp data dir):
//   create() resolved; create → :80 accepting (run.sh written through the host view right after
//   create, so it includes the supervisor's ≤0.5 s poll); stop; start (wake) → :80 accepting;
//   host memory per awake idle server and per sleeping server (MemAvailable delta over all
//   servers, and the cgroup's own figure); then N servers created, slept and woken in a row.
// Peer measured in the same run: the same python :80 server started directly on the host
// (spawn → accepting), so wake cost is shown as a ratio to starting the app alone.
// Usage: node --import tsx bench/runtime/bench.ts [runs=20] [burst=100]

import { spawn } from 'node:child_process';
import { chownSync, chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { memoryStats } from '../../src/runtime/cgroup.js';
import { MiB, newId, RUN_SH, startRuntime } from '../../test/runtime/helpers/env.js';

const runs = Number(process.argv[2] ?? 20);
const burst = Number(process.argv[3] ?? 100);

const accepting = (ip: string, port: number, timeoutMs = 10_000) =>
  new Promise<boolean>((resolve) => {
    const deadline = Date.now() + timeoutMs;
    const tryOnce = () => {
      const s = connect({ host: ip, port });
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => {
        s.destroy();
        if (Date.now() > deadline) resolve(false);
        else setTimeout(tryOnce, 2);
      });
    };
    tryOnce();
  });

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0], p50: s[Math.floor((s.length - 1) / 2)], max: s[s.length - 1] };
};
const fmt = (xs: number[]) => {
  const { min, p50, max } = stats(xs);
  return `min ${min.toFixed(1)}  p50 ${p50.toFixed(1)}  max ${max.toFixed(1)} ms`;
};
const memAvailable = () => Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) * 1024;
const now = () => performance.now();

function writeRunSh(rootfs: string, uid: number) {
  mkdirSync(join(rootfs, 'root/www'), { recursive: true });
  writeFileSync(join(rootfs, 'root/www/index.html'), 'bench\n');
  chownSync(join(rootfs, 'root/www'), uid, uid);
  chownSync(join(rootfs, 'root/www/index.html'), uid, uid);
  writeFileSync(join(rootfs, 'root/run.sh'), RUN_SH);
  chownSync(join(rootfs, 'root/run.sh'), uid, uid);
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
}

async function peer(): Promise<number> {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const script = RUN_SH.replace('("0.0.0.0", 80)', `("127.0.0.1", ${port})`).replace(/^#!.*\n/, '');
  const t = now();
  const child = spawn('bash', ['-c', script], { stdio: 'ignore' });
  await accepting('127.0.0.1', port);
  const ms = now() - t;
  child.kill('SIGKILL');
  return ms;
}

const env = await startRuntime('bench', 13, { subnet: '10.199.128.0/17' });
try {
  const created: number[] = [];
  const create80: number[] = [];
  const stops: number[] = [];
  const wakes: number[] = [];
  const wake80: number[] = [];
  const peers: number[] = [];
  const ids: string[] = [];
  for (let i = 0; i < runs; i++) {
    const id = newId('b');
    ids.push(id);
    let t = now();
    const s = await env.rt.create({ id, slug: `bench-${i}`, memoryBytes: 256 * MiB, diskBytes: 1024 * MiB });
    created.push(now() - t);
    writeRunSh(s.rootfs, s.uidBase);
    await accepting(s.ip, 80);
    create80.push(now() - t);
    t = now();
    await env.rt.stop(id);
    stops.push(now() - t);
    t = now();
    await env.rt.start(id);
    wakes.push(now() - t);
    await accepting(s.ip, 80);
    wake80.push(now() - t);
    peers.push(await peer());
  }
  // memory: all awake and idle vs all asleep
  await new Promise((r) => setTimeout(r, 2000));
  const cg = ids.map((id) => memoryStats(env.rt.cgroup(id)).memoryBytes);
  const awakeAvail = memAvailable();
  for (const id of ids) await env.rt.stop(id);
  await new Promise((r) => setTimeout(r, 2000));
  const sleepAvail = memAvailable();
  const sleepingCg = ids.map((id) => memoryStats(env.rt.cgroup(id)).memoryBytes);
  const p50peer = stats(peers).p50;
  console.log(`runtime bench: ${runs} runs, busy shared 2-core machine (other engineers' tests running)`);
  console.log(`create() resolved          ${fmt(created)}   (target p50 <= 250 ms)`);
  console.log(`create -> :80 accepting    ${fmt(create80)}   (includes supervisor poll <= 500 ms)`);
  console.log(`stop (sleep)               ${fmt(stops)}`);
  console.log(`start() resolved (wake)    ${fmt(wakes)}`);
  console.log(`wake -> :80 accepting      ${fmt(wake80)}   (target p50 <= 60 ms)`);
  console.log(`peer: same app on host     ${fmt(peers)}   wake/peer p50 ratio ${(stats(wake80).p50 / p50peer).toFixed(1)}x`);
  console.log(
    `memory per awake idle server: cgroup p50 ${(stats(cg).p50 / MiB).toFixed(1)} MiB; MemAvailable delta awake-asleep ${((sleepAvail - awakeAvail) / runs / MiB).toFixed(1)} MiB/server`,
  );
  console.log(`memory per sleeping server: cgroup ${(Math.max(...sleepingCg) / MiB).toFixed(1)} MiB (cgroup removed; only mounts and page cache remain)`);
  for (const id of ids) await env.rt.delete(id);

  if (burst > 0) {
    const bIds = Array.from({ length: burst }, () => newId('n'));
    let t = now();
    for (const [i, id] of bIds.entries()) await env.rt.create({ id, slug: `burst-${i}`, memoryBytes: 128 * MiB, diskBytes: 256 * MiB });
    const c = now() - t;
    t = now();
    for (const id of bIds) await env.rt.stop(id);
    const s = now() - t;
    t = now();
    for (const id of bIds) await env.rt.start(id);
    const w = now() - t;
    console.log(
      `${burst} servers in a row: create ${(c / 1000).toFixed(1)} s (${(c / burst).toFixed(0)} ms each), sleep ${(s / 1000).toFixed(1)} s (${(s / burst).toFixed(0)} ms each), wake ${(w / 1000).toFixed(1)} s (${(w / burst).toFixed(0)} ms each)`,
    );
  }
} finally {
  await env.cleanup();
}
