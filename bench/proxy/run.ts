// bench/proxy: requests/s and p99 latency, in one run, for
//   (a) direct      — wrk → the app
//   (b) rootbox     — wrk → the real edge + proxy (keep-alive agent) → the app
//   (c) nginx       — wrk → nginx reverse proxy (keep-alive upstream) → the app
//   (d) hp3 only    — wrk → http-proxy-3 alone on node:http (what the library costs by itself)
//   (e) node floor  — wrk → node:http answering the page itself (no proxying: the least any
//                     proxy on node's HTTP server can cost)
// printed with rootbox/nginx and proxy/direct ratios; with --tls also (b) and (c) over HTTPS
// (HTTP/1.1 over TLS, how production traffic arrives). The app is an nginx instance on loopback
// answering a 1 KiB page (fast enough that the proxies are what is measured), or, with
// `--target ip:80`, any app. With `--container`, the issue's own setup: the same nginx page served
// from inside a real runc container by a real daemon (container.ts), and the rootbox row goes
// through that daemon's edge over the container's veth, as the nginx row does. Both proxies run
// one worker: the daemon is one Node process, so nginx gets one worker process too
// (`--nginx-workers N` to change).
//
// Usage: node --import tsx bench/proxy/run.ts [--duration 10] [--connections 64] [--target ip:80] [--container] [--tls]

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const duration = Number(arg('duration', '10'));
const connections = Number(arg('connections', '64'));
const nginxWorkers = arg('nginx-workers', '1');
const tls = process.argv.includes('--tls');
const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-proxy-'));
const children: ChildProcess[] = [];

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const p = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

function nginx(name: string, server: string): ChildProcess {
  const prefix = join(dir, name);
  const conf = `worker_processes ${nginxWorkers};
pid ${prefix}.pid;
error_log ${prefix}.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/${name}-body;
  proxy_temp_path ${dir}/${name}-proxy;
  ${server}
}
`;
  writeFileSync(`${prefix}.conf`, conf);
  const child = spawn('nginx', ['-c', `${prefix}.conf`, '-p', dir, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'inherit'] });
  children.push(child);
  return child;
}

async function waitPort(port: number, host = '127.0.0.1'): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise<boolean>((r) => {
      const s = connect(port, host);
      s.once('connect', () => (s.destroy(), r(true)));
      s.once('error', () => r(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on ${port}`);
}

interface Result {
  /** CPU time (user + system) the proxy processes spent per request, µs. */
  cpuUs?: number;
  rps: number;
  p50: number;
  p99: number;
  errors: string;
}

const ms = (v: string, unit: string) => Number(v) * ({ us: 0.001, ms: 1, s: 1000 } as Record<string, number>)[unit];

/** user+system CPU seconds of a process and its children-by-pid list, from /proc. */
function cpuSeconds(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      /* gone */
    }
  }
  return ticks / 100; // USER_HZ
}

/** The pids of a process and its direct children (nginx master + workers). */
function family(pid: number): number[] {
  const out = [pid];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const f = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(f.slice(f.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

async function measured(url: string, host: string | undefined, pid: number): Promise<Result> {
  await wrk(url, host, true);
  const pids = family(pid);
  const before = cpuSeconds(pids);
  const r = await wrk(url, host, false);
  const used = cpuSeconds(pids) - before;
  return { ...r, cpuUs: (used * 1e6) / (r.rps * duration) };
}

async function wrk(url: string, host: string | undefined, warm = true): Promise<Result> {
  const args = ['-t1', `-c${connections}`, `-d${duration}s`, '--latency', ...(host ? ['-H', `Host: ${host}`] : []), url];
  // warm-up (connections, JIT, keep-alive pools)
  if (warm) {
    await run('wrk', ['-t1', `-c${connections}`, '-d2s', ...(host ? ['-H', `Host: ${host}`] : []), url]);
    return { rps: 0, p50: 0, p99: 0, errors: '' };
  }
  const out = await run('wrk', args);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN);
  const lat = (pct: string) => {
    const m = new RegExp(`\\s${pct}%\\s+([\\d.]+)(us|ms|s)`).exec(out);
    return m ? ms(m[1], m[2]) : NaN;
  };
  const errors = /Non-2xx or 3xx responses: (\d+)|Socket errors: .*/.exec(out)?.[0] ?? 'none';
  return { rps, p50: lat('50'), p99: lat('99'), errors };
}

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('error', reject);
    c.on('close', () => resolve(out));
  });
}

/** nginx as the same reverse proxy on an HTTPS listener (a throwaway self-signed certificate). */
async function nginxTlsProxy(target: string): Promise<{ port: number; pid: number }> {
  await run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    join(dir, 'k.pem'),
    '-out',
    join(dir, 'c.pem'),
    '-days',
    '1',
    '-subj',
    '/CN=bench.rbx.test',
  ]);
  const port = await freePort();
  const child = nginx(
    'proxytls',
    `upstream app { server ${target}; keepalive 64; keepalive_requests 100000; }
  server { listen 127.0.0.1:${port} ssl; ssl_certificate ${dir}/c.pem; ssl_certificate_key ${dir}/k.pem; keepalive_requests 100000;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host $host; proxy_set_header X-Forwarded-For $remote_addr; proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Forwarded-Host $host; } }`,
  );
  await waitPort(port);
  return { port, pid: child.pid! };
}

async function main(): Promise<void> {
  const helper = async (file: string, args: string[]) => {
    const c = spawn(process.execPath, ['--import', 'tsx', new URL(file, import.meta.url).pathname, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(c);
    const line = await new Promise<string>((r, j) => {
      createInterface({ input: c.stdout! }).once('line', r);
      c.once('exit', (code) => j(new Error(`${file} exited (${code}) before it was ready`)));
    });
    const out = JSON.parse(line) as { http: number; https?: number; target?: string; host?: string };
    return { pid: c.pid!, port: out.http, https: out.https ?? 0, target: out.target, host: out.host };
  };
  let target = arg('target', '');
  let inContainer: Awaited<ReturnType<typeof helper>> | undefined;
  if (process.argv.includes('--container')) {
    inContainer = await helper('./container.ts', []);
    target = inContainer.target!;
  } else if (!target) {
    // Port 80, as the daemon always forwards to <server ip>:80; a loopback address of its own.
    const appIp = arg('app-ip', '127.0.0.2');
    const page = 'x'.repeat(1024);
    nginx('app', `server { listen ${appIp}:80; keepalive_requests 100000; location / { default_type text/html; return 200 "${page}"; } }`);
    target = `${appIp}:80`;
  }
  const [th, tp] = target.split(':');
  if (tp !== '80') throw new Error('the app must listen on port 80: the daemon forwards to <server ip>:80');
  await waitPort(Number(tp), th);
  const nginxPort = await freePort();
  const nginxProxy = nginx(
    'proxy',
    `upstream app { server ${target}; keepalive 64; keepalive_requests 100000; }
  server { listen 127.0.0.1:${nginxPort}; keepalive_requests 100000;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host $host; proxy_set_header X-Forwarded-For $remote_addr; proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Forwarded-Host $host; } }`,
  );
  await waitPort(nginxPort);
  const rb = inContainer ?? (await helper('./serve.ts', [th, tp]));
  const rbHost = rb.host ?? 'bench.rbx.test';
  const plain = await helper('./plain.ts', [th, tp]);
  const floor = await helper('./floor.ts', [th, tp]);

  await wrk(`http://${target}/`, undefined, true);
  const direct = await wrk(`http://${target}/`, undefined, false);
  const rootbox = await measured(`http://127.0.0.1:${rb.port}/`, rbHost, rb.pid);
  const library = await measured(`http://127.0.0.1:${plain.port}/`, 'bench.rbx.test', plain.pid);
  const viaNginx = await measured(`http://127.0.0.1:${nginxPort}/`, 'bench.rbx.test', nginxProxy.pid!);
  const nodeFloor = await measured(`http://127.0.0.1:${floor.port}/`, undefined, floor.pid);
  let tlsRows: { rootbox: Result; nginx: Result } | undefined;
  if (tls) {
    const nginxTls = await nginxTlsProxy(target);
    tlsRows = {
      rootbox: await measured(`https://127.0.0.1:${rb.https}/`, rbHost, rb.pid),
      nginx: await measured(`https://127.0.0.1:${nginxTls.port}/`, 'bench.rbx.test', nginxTls.pid),
    };
  }

  const row = (name: string, r: Result) =>
    `${name.padEnd(8)} ${r.rps.toFixed(0).padStart(9)} req/s   p50 ${r.p50.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms   ${r.cpuUs ? `proxy CPU ${r.cpuUs.toFixed(1)} µs/req   ` : ''}errors: ${r.errors}`;
  console.log(
    `bench/proxy — ${duration}s per run, ${connections} connections, wrk -t1, nginx workers ${nginxWorkers}, app ${target}${inContainer ? ' (nginx in a runc container, through a real daemon)' : ''}`,
  );
  console.log(row('direct', direct));
  console.log(row('rootbox', rootbox));
  console.log(row('nginx', viaNginx));
  console.log(row('hp3 only', library) + '   (http-proxy-3 alone: no edge, no policy)');
  console.log(row('floor', nodeFloor) + '   (node:http answering by itself: no proxying)');
  if (tlsRows) {
    console.log(row('rb TLS', tlsRows.rootbox));
    console.log(row('ngx TLS', tlsRows.nginx));
  }
  console.log(`rootbox / nginx  throughput ${(rootbox.rps / viaNginx.rps).toFixed(2)}x (target ≥ 0.5x)   p99 ${(rootbox.p99 / viaNginx.p99).toFixed(2)}x`);
  console.log(`rootbox / nginx  CPU per request ${(rootbox.cpuUs! / viaNginx.cpuUs!).toFixed(2)}x (less sensitive to other load on the machine)`);
  console.log(
    `http-proxy-3 alone / nginx throughput ${(library.rps / viaNginx.rps).toFixed(2)}x   rootbox / http-proxy-3 alone ${(rootbox.rps / library.rps).toFixed(2)}x`,
  );
  console.log(
    `node floor / nginx proxy  CPU per request ${(nodeFloor.cpuUs! / viaNginx.cpuUs!).toFixed(2)}x   rootbox / node floor ${(rootbox.cpuUs! / nodeFloor.cpuUs!).toFixed(2)}x`,
  );
  if (tlsRows)
    console.log(
      `over TLS: rootbox / nginx throughput ${(tlsRows.rootbox.rps / tlsRows.nginx.rps).toFixed(2)}x   CPU per request ${(tlsRows.rootbox.cpuUs! / tlsRows.nginx.cpuUs!).toFixed(2)}x`,
    );
  console.log(`rootbox / direct throughput ${(rootbox.rps / direct.rps).toFixed(2)}x   nginx / direct throughput ${(viaNginx.rps / direct.rps).toFixed(2)}x`);
}

try {
  await main();
} finally {
  // every helper cleans up after itself (the container one deletes its server): wait for them
  const exited = children.map((c) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', r))));
  for (const c of children) if (c.pid && c.exitCode === null) c.kill('SIGTERM');
  await Promise.race([Promise.all(exited), new Promise((r) => setTimeout(r, 30_000))]);
  rmSync(dir, { recursive: true, force: true });
}
