// bench/ssh: the SSH front door beside OpenSSH's own sshd, measured in the same run on the same
// host with the same client (OpenSSH 9 scp, SFTP protocol, client-default cipher):
//   1. 1 GiB through scp, upload and download: rootbox (ssh2 → runc exec → the image's
//      sftp-server, file on the server's loop-mounted disk) vs a private sshd on 127.0.0.1
//      (its own config, host key and port; file on the host disk). Target: rootbox ≥ 0.9× sshd.
//   2. login latency: `ssh host true` (connect, kex, auth, exec, exit) and login-to-prompt
//      (`ssh -tt` until the shell prompt is printed). OpenSSH 9 prefers the post-quantum
//      sntrup761x25519 kex, which ssh2 lacks, so sshd is also measured with curve25519 pinned
//      (the kex rootbox negotiates) for a like-for-like figure.
// Rounds alternate which side goes first. The daemon is a test daemon (own bridge, data dir;
// everything deleted at the end); sshd is stopped by its PID.
//
// Usage: node --import tsx bench/ssh/run.ts [--mib 1024] [--rounds 3] [--logins 10]

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../test/helpers/run.js';
import { addServer, CLIENT_OPTS, startSshDaemon } from '../../test/ssh/helpers/env.js';
import { startSshd } from './sshd.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const MIB = Number(arg('mib', '1024'));
const ROUNDS = Number(arg('rounds', '3'));
const LOGINS = Number(arg('logins', '10'));

const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-ssh-'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

interface Peer {
  name: string;
  port: number;
  key: string;
  /** Remote path the upload writes to. */
  remote: string;
  extra?: string[];
}

async function timed(cmd: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  const r = await run(cmd, args, { timeoutMs: 600_000 });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} → ${r.code}: ${r.stderr}`);
  return (performance.now() - t0) / 1000;
}

const scp = (p: Peer, from: string, to: string) => timed('scp', ['-P', String(p.port), '-i', p.key, ...CLIENT_OPTS, '-o', 'LogLevel=ERROR', from, to]);
const sshLine = (p: Peer) => ['-p', String(p.port), '-i', p.key, ...CLIENT_OPTS, '-o', 'LogLevel=ERROR', ...(p.extra ?? []), 'root@127.0.0.1'];

/** Milliseconds from starting `ssh -tt` to the shell prompt (a line ending in `# `). */
function toPrompt(p: Peer): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const c = spawn('ssh', ['-tt', ...sshLine(p)], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let done = false;
    const timer = setTimeout(() => (c.kill('SIGKILL'), reject(new Error(`${p.name}: no prompt in 20 s: ${JSON.stringify(out.slice(-200))}`))), 20_000);
    c.stdout.on('data', (d) => {
      out += d;
      if (!done && /# $/.test(out)) {
        done = true;
        const ms = performance.now() - t0;
        c.stdin.write('exit\n');
        c.on('close', () => (clearTimeout(timer), resolve(ms)));
      }
    });
  });
}

const big = join(dir, 'big.bin');
await run('sh', ['-c', `head -c ${MIB * 1048576} /dev/urandom > ${big}`], { timeoutMs: 600_000 });
const sshd = await startSshd(join(dir, 'sshd'));
const d = await startSshDaemon({ proxy: { idleTimeout: '1h' } });
try {
  // The paid tier's RAM ceiling (4 GiB): a server's page cache is charged to its cgroup, so with
  // less than the file size the download would measure the loop disk, not SSH.
  const srv = await addServer(d, 'bench-ssh', { memoryBytes: 4 * 1024 * 1048576, diskBytes: (MIB + 1024) * 1048576 }, true);
  const peers: Peer[] = [
    { name: 'rootbox', port: d.port, key: srv.keyFile, remote: '/root/big.up' },
    { name: 'sshd', port: sshd.port, key: sshd.keyFile, remote: join(dir, 'sshd', 'big.up') },
  ];
  const up: Record<string, number[]> = { rootbox: [], sshd: [] };
  const down: Record<string, number[]> = { rootbox: [], sshd: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? [...peers].reverse() : peers;
    for (const p of order) up[p.name].push(MIB / (await scp(p, big, `root@127.0.0.1:${p.remote}`)));
    for (const p of order) {
      const local = join(dir, `down-${p.name}`);
      down[p.name].push(MIB / (await scp(p, `root@127.0.0.1:${p.remote}`, local)));
      if (statSync(local).size !== MIB * 1048576) throw new Error(`${p.name}: short download`);
      rmSync(local);
    }
    process.stdout.write(
      `round ${r + 1}: up ${peers.map((p) => `${p.name} ${up[p.name][r].toFixed(0)}`).join(' / ')} MiB/s; down ${peers.map((p) => `${p.name} ${down[p.name][r].toFixed(0)}`).join(' / ')} MiB/s\n`,
    );
  }
  const loginPeers: Peer[] = [...peers, { ...peers[1], name: 'sshd-x25519', extra: ['-o', 'KexAlgorithms=curve25519-sha256'] }];
  const trueMs: Record<string, number[]> = { rootbox: [], sshd: [], 'sshd-x25519': [] };
  const promptMs: Record<string, number[]> = { rootbox: [], sshd: [], 'sshd-x25519': [] };
  for (let i = 0; i < LOGINS; i++) {
    for (const p of i % 2 ? [...loginPeers].reverse() : loginPeers) {
      trueMs[p.name].push(1000 * (await timed('ssh', [...sshLine(p), 'true'])));
      promptMs[p.name].push(await toPrompt(p));
    }
  }
  const line = (label: string, a: number, b: number, unit: string, higherBetter: boolean) =>
    `${label.padEnd(28)} rootbox ${a.toFixed(1).padStart(7)} ${unit}   sshd ${b.toFixed(1).padStart(7)} ${unit}   rootbox/sshd ${(higherBetter ? a / b : b / a).toFixed(2)}×${higherBetter ? '' : ' (speed)'}\n`;
  process.stdout.write(`\nmedians over ${ROUNDS} rounds of ${MIB} MiB and ${LOGINS} logins (busy shared 2-core host):\n`);
  process.stdout.write(line('scp upload', median(up.rootbox), median(up.sshd), 'MiB/s', true));
  process.stdout.write(line('scp download', median(down.rootbox), median(down.sshd), 'MiB/s', true));
  process.stdout.write(line('ssh host true', median(trueMs.rootbox), median(trueMs.sshd), 'ms', false));
  process.stdout.write(line('  same, sshd kex x25519', median(trueMs.rootbox), median(trueMs['sshd-x25519']), 'ms', false));
  process.stdout.write(line('login to prompt (ssh -tt)', median(promptMs.rootbox), median(promptMs.sshd), 'ms', false));
  process.stdout.write(line('  same, sshd kex x25519', median(promptMs.rootbox), median(promptMs['sshd-x25519']), 'ms', false));
} finally {
  await d.stop();
  await sshd.stop();
  rmSync(dir, { recursive: true, force: true });
}
