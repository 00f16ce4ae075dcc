// bench/wake/profile-create: where `runc create` of a sleeping server spends its time. Times N plain
// runc creates of its bundle, then one under strace -f -tt -T with runc --debug (create.strace,
// debug.log and config.json in <outdir>). Usage: node --import tsx bench/wake/profile-create.ts <outdir> [n]
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import type { ContainerRuntime } from '../../src/runtime/index.js';

const out = process.argv[2] ?? '/tmp/rootbox-runc-profile';
const N = Number(process.argv[3] ?? '5');
mkdirSync(out, { recursive: true });
const d = await startTestDaemon({ publicIp: '127.0.0.1', log: { level: 'warn' }, runtime: { parkOnSleep: 'off' } });
try {
  const rt = d.daemon.runtime as ContainerRuntime;
  const srv = await rt.create({ id: 'srv_prof1', slug: 'prof1', memoryBytes: 256 * 1024 * 1024, diskBytes: 512 * 1024 * 1024 });
  await rt.stop(srv.id);
  await rt.start(srv.id);
  await rt.stop(srv.id);
  const bundle = join(rt.serverDir(srv.id), 'bundle');
  const root = rt.runc.root;
  const times: number[] = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    execFileSync('runc', ['--root', root, 'create', '--bundle', bundle, srv.id], { stdio: ['ignore', 'ignore', 'inherit'] });
    times.push(performance.now() - t0);
    execFileSync('runc', ['--root', root, 'delete', '--force', srv.id]);
  }
  console.log('plain runc create ms:', times.map((t) => t.toFixed(1)).join(' '));
  // strace -f waits for every traced process, and runc create leaves init waiting: delete it once create is done
  const tracer = spawn(
    'strace',
    [
      '-f',
      '-tt',
      '-T',
      '-o',
      join(out, 'create.strace'),
      'runc',
      '--root',
      root,
      '--debug',
      '--log',
      join(out, 'debug.log'),
      'create',
      '--bundle',
      bundle,
      srv.id,
    ],
    { stdio: 'ignore' },
  );
  const ended = new Promise((r) => tracer.once('exit', r));
  for (let i = 0; i < 300 && !(await rt.runc.state(srv.id).then((s) => s?.status === 'created')); i++) await new Promise((r) => setTimeout(r, 50));
  execFileSync('runc', ['--root', root, 'delete', '--force', srv.id]);
  await ended;
  execFileSync('cp', [join(bundle, 'config.json'), join(out, 'config.json')]);
  await rt.delete(srv.id);
} finally {
  await d.stop();
}
