// bench/ssh forwarded: SSH through another host (issue 29 item 4) beside SSH to the owner, in
// the same run with the same client (OpenSSH scp, SFTP protocol, client-default cipher): two
// daemons on one PostgreSQL registry (test/registry/fixtures/twohosts.ts), each in a process of
// its own as on two hosts (B is this script run again as `host-b <registry url>`), a server
// (runc container) created on A, then
//   1. scp upload and download of --mib MiB to A's SSH port (direct) and to B's (relayed over the
//      mutual-TLS channel: B's ssh2 server → ssh2 client on a channel stream → A's ssh2 server);
//   2. `ssh host true` latency (connect, kex, auth, exec, exit) both ways; through B it adds the
//      registry key lookup, the channel stream and a second SSH handshake.
// Rounds alternate which side goes first. Everything is deleted at the end.
//
// Usage: node --import tsx bench/ssh/forwarded.ts [--mib 100] [--rounds 3] [--logins 10]
// BENCH_PROF=<dir> writes a CPU profile of host B's process there.
// (each host is one Node process; on this shared 2-core machine the client and both hosts
// compete for the same cores, which a real pair of hosts would not)

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../test/helpers/run.js';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import { freePort } from '../../test/helpers/ports.js';
import type { TestPostgres } from '../../test/helpers/postgres.js';
import { api, clusterOpts, startTwoHosts } from '../../test/registry/fixtures/twohosts.js';
import { CLIENT_OPTS } from '../../test/ssh/helpers/env.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const MIB = Number(arg('mib', '100')); // an anonymous server's disk is 256 MiB (its image included)
const ROUNDS = Number(arg('rounds', '3'));
const LOGINS = Number(arg('logins', '10'));

const SETTINGS = { proxy: { idleTimeout: '1h' } };

if (process.argv[2] === 'host-b') {
  // host B in a process of its own: prints its SSH port, stops on SIGTERM
  const pg = { url: process.argv[3] } as TestPostgres; // its address is all the settings read
  const b = await startTestDaemon({ ...clusterOpts(pg, 'host-b', await freePort()), ...SETTINGS });
  process.stdout.write(`${JSON.stringify({ ssh: b.daemon.ssh.port })}\n`);
  process.once('SIGTERM', () => void b.stop().then(() => process.exit(0)));
  await new Promise(() => {});
}

/** Host B's process and its SSH port. */
async function startB(url: string): Promise<{ port: number; stop(): Promise<void> }> {
  const child = spawn(
    process.execPath,
    [
      ...(process.env.BENCH_PROF ? ['--cpu-prof', '--cpu-prof-dir=' + process.env.BENCH_PROF] : []),
      '--import',
      'tsx',
      new URL(import.meta.url).pathname,
      'host-b',
      url,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (x: Buffer) => {
      out += x;
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]).ssh);
    });
    child.once('exit', (code) => reject(new Error(`host-b exited (${code}) before it was ready`)));
  });
  return { port, stop: () => (child.kill('SIGTERM'), exited) };
}

const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-sshfwd-'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timed(cmd: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  const r = await run(cmd, args, { timeoutMs: 600_000 });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} → ${r.code}: ${r.stderr}`);
  return (performance.now() - t0) / 1000;
}

const big = join(dir, 'big.bin');
await run('sh', ['-c', `head -c ${MIB * 1048576} /dev/urandom > ${big}`], { timeoutMs: 600_000 });
const hosts = await startTwoHosts(SETTINGS, 'host-a');
let b: Awaited<ReturnType<typeof startB>> | undefined;
try {
  b = await startB(hosts.pg.url);
  const made = await api(hosts.a, 'POST', '/create', { body: {} });
  if (made.status !== 200) throw new Error(`create: ${made.status} ${made.text}`);
  const key = join(dir, 'key');
  writeFileSync(key, made.json.ssh_private_key, { mode: 0o600 });
  const peers = [
    { name: 'direct', port: hosts.a.daemon.ssh.port },
    { name: 'via B', port: b.port },
  ];
  /** scp takes the port as -P, ssh as -p. */
  const opts = (port: number, flag = '-P') => ['-i', key, ...CLIENT_OPTS, '-o', 'LogLevel=ERROR', flag, String(port)];
  const up: Record<string, number[]> = { direct: [], 'via B': [] };
  const down: Record<string, number[]> = { direct: [], 'via B': [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? [...peers].reverse() : peers;
    for (const p of order) up[p.name].push(MIB / (await timed('scp', [...opts(p.port), big, 'root@127.0.0.1:/root/big.up'])));
    for (const p of order) {
      const local = join(dir, 'down.bin');
      down[p.name].push(MIB / (await timed('scp', [...opts(p.port), 'root@127.0.0.1:/root/big.up', local])));
      if (statSync(local).size !== MIB * 1048576) throw new Error(`${p.name}: short download`);
      rmSync(local);
    }
    process.stdout.write(
      `round ${r + 1}: up ${peers.map((p) => `${p.name} ${up[p.name][r].toFixed(0)}`).join(' / ')} MiB/s; down ${peers.map((p) => `${p.name} ${down[p.name][r].toFixed(0)}`).join(' / ')} MiB/s\n`,
    );
  }
  const trueMs: Record<string, number[]> = { direct: [], 'via B': [] };
  for (let i = 0; i < LOGINS; i++) {
    for (const p of i % 2 ? [...peers].reverse() : peers) {
      trueMs[p.name].push(1000 * (await timed('ssh', [...opts(p.port, '-p'), 'root@127.0.0.1', 'true'])));
    }
  }
  const line = (label: string, a: number, b: number, unit: string, higherBetter: boolean) =>
    `${label.padEnd(16)} direct ${a.toFixed(1).padStart(7)} ${unit}   via B ${b.toFixed(1).padStart(7)} ${unit}   via B/direct ${(higherBetter ? b / a : a / b).toFixed(2)}×${higherBetter ? '' : ' (speed)'}\n`;
  process.stdout.write(`\nmedians over ${ROUNDS} rounds of ${MIB} MiB and ${LOGINS} logins (busy shared 2-core host):\n`);
  process.stdout.write(line('scp upload', median(up.direct), median(up['via B']), 'MiB/s', true));
  process.stdout.write(line('scp download', median(down.direct), median(down['via B']), 'MiB/s', true));
  process.stdout.write(line('ssh host true', median(trueMs.direct), median(trueMs['via B']), 'ms', false));
} finally {
  await b?.stop();
  await hosts.stop();
  rmSync(dir, { recursive: true, force: true });
}
