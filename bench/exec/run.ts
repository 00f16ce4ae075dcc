// bench/exec: the latency of running `true` in an awake server, three ways in the same run and
// interleaved round by round: POST /servers/{id}/exec over HTTP (kept-alive connection, JSON
// answer; string command → /bin/sh -c true, and argv ["true"]), `ssh host true` with OpenSSH
// through rootbox's SSH server (a new connection each time, as an agent's tool would), and a bare
// `runc exec <id> true` of the same container (the floor every way pays). Prints p50 and p90 of
// each and the ratio of the HTTP exec's p50 to the bare runc exec's (target ≤ 1.2).
//
// Usage: node --import tsx bench/exec/run.ts [--rounds 50]

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import { run } from '../../test/helpers/run.js';
import { CLIENT_OPTS } from '../../test/ssh/helpers/env.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const ROUNDS = Number(arg('rounds', '50'));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

const d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 100_000, perKeyPerMinute: 100_000 } }, proxy: { idleTimeout: '1h' } });
const work = mkdtempSync(join(tmpdir(), 'rbx-bench-exec-'));
try {
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('bench/exec needs the runc runtime');
  const rt = d.daemon.runtime;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const post = (path: string, body: unknown, key?: string) =>
    new Promise<{ status: number; json: Record<string, unknown> }>((resolve, reject) => {
      const raw = JSON.stringify(body);
      const req = request(
        {
          host: '127.0.0.1',
          port: d.http,
          method: 'POST',
          path,
          agent,
          headers: {
            host: 'api.localhost',
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(raw),
            ...(key ? { authorization: `Bearer ${key}` } : {}),
          },
        },
        (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(parts).toString()) }));
        },
      );
      req.on('error', reject);
      req.end(raw);
    });
  const created = await post('/create', {});
  if (created.status !== 200) throw new Error(`create: ${JSON.stringify(created.json)}`);
  const id = String(created.json.id);
  const key = String(created.json.api_key);
  const keyFile = join(work, 'key');
  writeFileSync(keyFile, String(created.json.ssh_private_key), { mode: 0o600 });

  const timed = async (fn: () => Promise<void>) => {
    const t0 = performance.now();
    await fn();
    return performance.now() - t0;
  };
  const httpExec = (command: string | string[]) => async () => {
    const r = await post(`/servers/${id}/exec`, { command }, key);
    if (r.status !== 200 || r.json.exit_code !== 0) throw new Error(`exec: ${JSON.stringify(r.json)}`);
  };
  const ssh = async () => {
    const r = await run('ssh', ['-p', String(d.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS, 'root@127.0.0.1', 'true'], { timeoutMs: 30_000 });
    if (r.code !== 0) throw new Error(`ssh: ${r.stderr}`);
  };
  const bare = () =>
    new Promise<void>((resolve, reject) => {
      const c = spawn('runc', rt.runc.execArgs(id, { tty: false, argv: ['true'] }), { stdio: 'ignore' });
      c.on('error', reject);
      c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`runc exec: ${code}`))));
    });
  const ways: [string, () => Promise<void>][] = [
    ['POST /exec "true" (sh -c)', httpExec('true')],
    ['POST /exec ["true"]', httpExec(['true'])],
    ['ssh host true (OpenSSH)', ssh],
    ['runc exec <id> true (bare)', bare],
  ];
  const times = new Map<string, number[]>(ways.map(([n]) => [n, []]));
  for (let i = 0; i < 3; i++) for (const [, fn] of ways) await fn(); // warm up
  for (let i = 0; i < ROUNDS; i++) for (const [n, fn] of ways) times.get(n)!.push(await timed(fn));
  const bareP50 = pct(times.get(ways[3][0])!, 50);
  console.log(`exec of true on an awake server, ${ROUNDS} rounds interleaved (ms)`);
  for (const [n] of ways) {
    const xs = times.get(n)!;
    console.log(
      `${n.padEnd(30)} p50 ${pct(xs, 50).toFixed(1).padStart(7)}  p90 ${pct(xs, 90).toFixed(1).padStart(7)}  p50/bare ${(pct(xs, 50) / bareP50).toFixed(2)}`,
    );
  }
  agent.destroy();
} finally {
  await d.stop();
  rmSync(work, { recursive: true, force: true });
}
