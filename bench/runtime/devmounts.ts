// bench/runtime/devmounts: what the server's own /dev (runtime/devices.ts: a skel bind, a tmpfs with
// tmpcopyup and six binds from the daemon's devices tmpfs) costs `runc create`, beside the same
// bundle with runc's own /dev (a tmpfs, runc binding the host's device files), alternating in one
// run. Usage: node --import tsx bench/runtime/devmounts.ts [n]
import { execFileSync } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import type { ContainerRuntime } from '../../src/runtime/index.js';

const N = Number(process.argv[2] ?? '20');
const d = await startTestDaemon({ publicIp: '127.0.0.1', log: { level: 'warn' }, runtime: { parkOnSleep: 'off' } });
try {
  const rt = d.daemon.runtime as ContainerRuntime;
  const srv = await rt.create({ id: 'srv_devb1', slug: 'devb1', memoryBytes: 256 * 1024 * 1024, diskBytes: 512 * 1024 * 1024 });
  await rt.stop(srv.id);
  const bundle = join(rt.serverDir(srv.id), 'bundle');
  const runcs = join(rt.serverDir(srv.id), 'bundle-runcdev');
  cpSync(bundle, runcs, { recursive: true });
  const spec = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8')) as { mounts: { destination: string; type: string; options?: string[] }[] };
  spec.mounts = spec.mounts.filter(
    (m) => !(m.destination === '/dev' && m.type === 'bind') && !/^\/dev\/(null|zero|full|random|urandom|tty)$/.test(m.destination),
  );
  for (const m of spec.mounts) if (m.destination === '/dev') m.options = m.options!.filter((o) => o !== 'tmpcopyup');
  writeFileSync(join(runcs, 'config.json'), JSON.stringify(spec));
  const root = rt.runc.root;
  const times: Record<string, number[]> = { 'own /dev (devices.ts)': [], "runc's /dev (host devtmpfs)": [] };
  const dirs: Record<string, string> = { 'own /dev (devices.ts)': bundle, "runc's /dev (host devtmpfs)": runcs };
  for (let i = 0; i < N; i++) {
    for (const label of i % 2 ? Object.keys(times).reverse() : Object.keys(times)) {
      const t0 = performance.now();
      execFileSync('runc', ['--root', root, 'create', '--bundle', dirs[label], srv.id], { stdio: ['ignore', 'ignore', 'inherit'] });
      times[label].push(performance.now() - t0);
      execFileSync('runc', ['--root', root, 'delete', '--force', srv.id]);
    }
  }
  const p = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))];
  const base = p(times["runc's /dev (host devtmpfs)"], 0.5);
  for (const [label, xs] of Object.entries(times))
    console.log(
      `runc create, ${label.padEnd(30)} p50 ${p(xs, 0.5).toFixed(1)} ms  p90 ${p(xs, 0.9).toFixed(1)} ms  ratio ${(p(xs, 0.5) / base).toFixed(2)}  (n=${xs.length})`,
    );
} finally {
  await d.stop();
}
