// bench/proxy: requests/s and p99 latency, in one run, for
//   (a) direct      — wrk → the app
//   (b) rootbox     — wrk → the real edge + proxy (keep-alive agent) → the app
//   (b') forwarded  — wrk → host B's edge → the cluster channel (the raw lane's multiplexed
//                     mutual-TLS connection) → host A's proxy → the app (forwarded.ts: two
//                     processes, both on the proxy core); its added latency at one connection
//   (c) nginx       — wrk → nginx reverse proxy (keep-alive upstream) → the app
//   (c') caddy, haproxy — the same reverse proxy in Caddy and HAProxy, one core each (peers.ts)
//   (d) hp3 only    — wrk → http-proxy-3 alone on node:http (what the library costs by itself)
//   (e) node floor  — wrk → node:http answering the page itself (no proxying: the least any
//                     proxy on node's HTTP server can cost)
// printed with rootbox/peer and proxy/direct ratios; with --tls also (b), (c), (c') over HTTPS
// (HTTP/1.1 over TLS, how production traffic arrives). The app is an nginx instance on loopback
// answering a 1 KiB page (fast enough that the proxies are what is measured), or, with
// `--target ip:80`, any app. With `--container`, the issue's own setup: the same nginx page served
// from inside a real runc container by a real daemon (container.ts), and the rootbox row goes
// through that daemon's edge over the container's veth, as the nginx row does. Both proxies run
// one worker: the daemon is one Node process, so nginx gets one worker process too
// (`--nginx-workers N` to change). Two more rows compare forwarders on a bare node:http server:
// (f) rootbox's own (fwd.ts) and (g) an undici Pool (undici.ts).
// Cores: with two or more, every proxy (the daemon with all its threads, nginx, the peers) is
// pinned to one core (`--proxy-cpu`, default 0) and wrk and the app to another (`--load-cpu`,
// default 1), so each proxy gets the same single core and the load does not steal from it;
// `--load-cpu any` pins only the proxies; `--no-pin` leaves scheduling to the kernel. `--raw` adds
// the rows of raw.ts, a prototype front that skips node's HTTP server; `--threads N` the rows of
// threads.ts, the edge + proxy in N worker threads of one process sharing the listeners (on
// `--threads-cpus`, default every core: more cores than nginx's one worker, which is the point). Each proxy row shows the share of its core it used
// (near 100%: the proxy is the bottleneck, and requests/s compare proxies; less: the load side is).
//
// `--repeat N` measures every row N times, the rows taking turns, and shows each row's median
// and the spread of its rounds (the machine is shared: the spread is the noise).
// `--lanes` adds the forwarded row by the channel's other path for a GET: node's server with the
// front's full path over the HTTP/2 session (the raw lane taken away, as beyond its pool's cap).
//
// With `--container` the daemon runs bundled as it ships (esbuild, see bundle()); `--tsx` runs it from source.
// Usage: node --import tsx bench/proxy/run.ts [--duration 10] [--connections 64] [--target ip:80] [--container] [--tls] [--no-pin] [--tsx]
//   [--repeat N] [--forwarded] [--lanes] [--raw] [--threads N] [--threads-cpus list] [--proxy-cpu N] [--load-cpu N|any] [--nginx-workers N]

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { caddy, certificate, haproxy, nginxProxyServer, nginxWith, type Peer } from './peers.js';

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
const pin = !process.argv.includes('--no-pin') && availableParallelism() >= 2;
const proxyCpu = arg('proxy-cpu', '0');
const loadCpu = arg('load-cpu', '1');
/** The command pinned to `cpu` (taskset execs it: the pid stays the command's). */
const pinned = (cpu: string, cmd: string, args: string[]): [string, string[]] => (pin && cpu !== 'any' ? ['taskset', ['-c', cpu, cmd, ...args]] : [cmd, args]);
/** Pins every thread of a running process. */
const pinPid = (cpu: string, pid: number) => (pin && cpu !== 'any' ? run('taskset', ['-a', '-cp', cpu, String(pid)]) : Promise.resolve(''));
/** Also measure the prototypes (raw.ts: an HTTP/1.1 front without node:http). */
const prototypes = process.argv.includes('--raw');
/** Also measure threads.ts: the edge + proxy in this many worker threads sharing the listeners (0: not). */
const threads = Number(arg('threads', '0'));
/** The cores the threads row may use (default: every core). */
const threadCpus = arg('threads-cpus', 'any');
/** Rounds of every row (each row shows its median round and the spread). */
const repeat = Math.max(1, Number(arg('repeat', '1')));
/** Only the rows of the forwarded figures: direct, rootbox and forwarded (the quick loop while working on the channel). */
const onlyForwarded = process.argv.includes('--forwarded');
/** Also the forwarded row by the full path alone (no raw lane). */
const lanes = process.argv.includes('--lanes');

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const p = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

/** An nginx of one's own (peers.ts), pinned to `cpu`. */
function nginx(name: string, server: string, cpu = proxyCpu): ChildProcess {
  const child = nginxWith(dir, name, nginxWorkers, server, (cmd, args) => pinned(cpu, cmd, args));
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

/**
 * Pids of the app nginx inside the container: its master, found by its command line, and the master's
 * workers (their command line is only "nginx: worker process"). Pinning the master alone leaves the
 * worker that serves the requests free to run on the proxy's core, where the scheduler keeps waking it
 * beside the proxy that writes to it.
 */
function appPids(): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'latin1').includes('/root/ngx/nginx')) out.push(...family(Number(d)));
    } catch {
      /* gone */
    }
  }
  return out;
}

interface Result {
  /** CPU time (user + system) the proxy processes spent per request, µs. */
  cpuUs?: number;
  /** Of which in user space (the rest is the kernel's: syscalls, TCP). */
  userUs?: number;
  /** Share of one core the proxy processes used during the run. */
  core?: number;
  /** With --repeat: (max − min) / median of the rounds' requests/s. */
  spread?: number;
  rps: number;
  p50: number;
  p99: number;
  errors: string;
}

const ms = (v: string, unit: string) => Number(v) * ({ us: 0.001, ms: 1, s: 1000 } as Record<string, number>)[unit];

/** [user, system] CPU seconds of a list of processes, from /proc. */
function cpuSeconds(pids: number[]): [number, number] {
  let user = 0;
  let sys = 0;
  for (const pid of pids) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
      user += Number(fields[11]);
      sys += Number(fields[12]);
    } catch {
      /* gone */
    }
  }
  return [user / 100, sys / 100]; // USER_HZ
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

async function measured(url: string, host: string | undefined, pid: number, more: number[] = [], conns = connections): Promise<Result> {
  await wrk(url, host, true, conns);
  const pids = [...family(pid), ...more.flatMap(family)];
  const [u0, s0] = cpuSeconds(pids);
  const r = await wrk(url, host, false, conns);
  const [u1, s1] = cpuSeconds(pids);
  const n = r.rps * duration;
  return { ...r, cpuUs: ((u1 - u0 + s1 - s0) * 1e6) / n, userUs: ((u1 - u0) * 1e6) / n, core: (u1 - u0 + s1 - s0) / duration };
}

async function wrk(url: string, host: string | undefined, warm = true, conns = connections): Promise<Result> {
  const args = ['-t1', `-c${conns}`, `-d${duration}s`, '--latency', ...(host ? ['-H', `Host: ${host}`] : []), url];
  // warm-up (connections, JIT, keep-alive pools)
  if (warm) {
    await run(...pinned(loadCpu, 'wrk', ['-t1', `-c${conns}`, '-d2s', ...(host ? ['-H', `Host: ${host}`] : []), url]));
    return { rps: 0, p50: 0, p99: 0, errors: '' };
  }
  const out = await run(...pinned(loadCpu, 'wrk', args));
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
    running.add(c);
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('error', reject);
    c.on('close', () => (running.delete(c), resolve(out)));
  });
}

/**
 * The real daemon runs as it ships: bundled by esbuild with build.mjs's options (scripts/bundle.mjs:
 * natives external, no keepNames), not through tsx, whose transform keeps function names by wrapping every named
 * closure in a call the shipped bundle does not make. `--tsx` runs it from source instead.
 */
async function bundle(file: string): Promise<string> {
  const { build, stop } = await import('esbuild');
  const out = new URL(`../../dist/bench/${file.replace(/^\.\/|\.ts$/g, '')}.mjs`, import.meta.url).pathname;
  const { bundleOptions } = await import('../../scripts/bundle.mjs');
  await build({
    ...bundleOptions,
    entryPoints: [new URL(file, import.meta.url).pathname],
    outfile: out,
    external: [...(bundleOptions.external ?? []), 'esbuild'],
  });
  await stop(); // esbuild's service process would otherwise stay, on whatever core, for the whole run
  return out;
}

async function main(): Promise<void> {
  const helper = async (file: string, args: string[], cpu: string | undefined = proxyCpu, bundled = false) => {
    const argv = bundled ? [await bundle(file), ...args] : ['--import', 'tsx', new URL(file, import.meta.url).pathname, ...args];
    const c = spawn(...(cpu ? pinned(cpu, process.execPath, argv) : ([process.execPath, argv] as [string, string[]])), {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
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
    // set up on every core, then the daemon (all its threads) moves to the proxy core, the app to the load core
    inContainer = await helper('./container.ts', [], undefined, !process.argv.includes('--tsx'));
    target = inContainer.target!;
    await pinPid(proxyCpu, inContainer.pid);
    const app = appPids();
    if (pin && app.length < 2) throw new Error(`found ${app.length} of the app's nginx processes (master and worker) to pin`);
    for (const pid of app) await pinPid(loadCpu, pid);
  } else if (!target) {
    // Port 80, as the daemon always forwards to <server ip>:80; a loopback address of its own.
    const appIp = arg('app-ip', '127.0.0.2');
    const page = 'x'.repeat(1024);
    nginx('app', `server { listen ${appIp}:80; keepalive_requests 100000; location / { default_type text/html; return 200 "${page}"; } }`, loadCpu);
    target = `${appIp}:80`;
  }
  const [th, tp] = target.split(':');
  if (tp !== '80') throw new Error('the app must listen on port 80: the daemon forwards to <server ip>:80');
  await waitPort(Number(tp), th);
  const nginxPort = await freePort();
  const nginxProxy = nginx('proxy', nginxProxyServer(dir, target, `127.0.0.1:${nginxPort}`));
  await waitPort(nginxPort);
  await certificate(dir, run);
  const nginxTlsPort = await freePort();
  const nginxTls = tls ? nginx('proxytls', nginxProxyServer(dir, target, `127.0.0.1:${nginxTlsPort} ssl`)) : undefined;
  if (tls) await waitPort(nginxTlsPort);
  const peers: Peer[] = [];
  for (const start of [caddy, haproxy]) {
    const { child, peer } = start(dir, target, await freePort(), await freePort(), (cmd, args) => pinned(proxyCpu, cmd, args));
    children.push(child);
    await waitPort(peer.port);
    await waitPort(peer.tlsPort);
    peers.push(peer);
  }
  const rb = inContainer ?? (await helper('./serve.ts', [th, tp]));
  // the forwarded row: host A (owner) behind its channel, host B's edge in front (both on the proxy core)
  const owner = await helper('./forwarded.ts', ['owner', th, tp, dir]);
  const sender = await helper('./forwarded.ts', ['sender', String(owner.port), dir]);
  const senderFull = lanes ? await helper('./forwarded.ts', ['sender', String(owner.port), dir, 'full']) : undefined;
  const rbHost = rb.host ?? 'bench.rbx.test';
  const plain = await helper('./plain.ts', [th, tp]);
  const floor = await helper('./floor.ts', tls ? [join(dir, 'c.pem'), join(dir, 'k.pem')] : []);
  const own = await helper('./fwd.ts', [th, tp]);
  const undici = await helper('./undici.ts', [th, tp]);
  const raw = prototypes ? await helper('./raw.ts', [th, tp, ...(tls ? [join(dir, 'c.pem'), join(dir, 'k.pem')] : [])]) : undefined;

  const thr = threads > 0 ? await helper('./threads.ts', [th, tp, String(threads)], threadCpus === 'any' ? undefined : threadCpus) : undefined;
  const h = 'bench.rbx.test';
  // one round measures every row once; with --repeat the rounds alternate and each row reports its median round
  const round = async () => {
    await wrk(`http://${target}/`, undefined, true);
    const direct = await wrk(`http://${target}/`, undefined, false);
    const rootbox = await measured(`http://127.0.0.1:${rb.port}/`, rbHost, rb.pid);
    const forwarded = await measured(`http://127.0.0.1:${sender.port}/`, h, sender.pid, [owner.pid]);
    // added latency is what one request waits more, not queueing under load: one connection each
    const rootbox1 = await measured(`http://127.0.0.1:${rb.port}/`, rbHost, rb.pid, [], 1);
    const forwarded1 = await measured(`http://127.0.0.1:${sender.port}/`, h, sender.pid, [owner.pid], 1);
    const viaFull = senderFull && (await measured(`http://127.0.0.1:${senderFull.port}/`, h, senderFull.pid, [owner.pid]));
    if (onlyForwarded) return { direct, rootbox, forwarded, rootbox1, forwarded1, viaFull };
    const viaNginx = await measured(`http://127.0.0.1:${nginxPort}/`, h, nginxProxy.pid!);
    const viaPeers: Result[] = [];
    for (const p of peers) viaPeers.push(await measured(`http://127.0.0.1:${p.port}/`, h, p.pid));
    const library = await measured(`http://127.0.0.1:${plain.port}/`, h, plain.pid);
    const ownFwd = await measured(`http://127.0.0.1:${own.port}/`, h, own.pid);
    const viaUndici = await measured(`http://127.0.0.1:${undici.port}/`, h, undici.pid);
    const nodeFloor = await measured(`http://127.0.0.1:${floor.port}/`, undefined, floor.pid);
    const thrRow = thr && (await measured(`http://127.0.0.1:${thr.port}/`, h, thr.pid));
    const rawRow = raw && (await measured(`http://127.0.0.1:${raw.port}/`, h, raw.pid));
    const rbTls = tls ? await measured(`https://127.0.0.1:${rb.https}/`, rbHost, rb.pid) : undefined;
    const ngxTls = tls ? await measured(`https://127.0.0.1:${nginxTlsPort}/`, h, nginxTls!.pid!) : undefined;
    const peersTls: Result[] = [];
    for (const p of tls ? peers : []) peersTls.push(await measured(`https://127.0.0.1:${p.tlsPort}/`, h, p.pid));
    const floorTls = tls ? await measured(`https://127.0.0.1:${floor.https}/`, undefined, floor.pid) : undefined;
    const thrTls = thr && tls ? await measured(`https://127.0.0.1:${thr.https}/`, h, thr.pid) : undefined;
    const rawTls = raw && tls ? await measured(`https://127.0.0.1:${raw.https}/`, h, raw.pid) : undefined;
    return {
      direct,
      rootbox,
      forwarded,
      rootbox1,
      forwarded1,
      viaFull,
      viaNginx,
      peerRows: { ...named(viaPeers, ''), ...named(peersTls, 'Tls') },
      library,
      ownFwd,
      viaUndici,
      nodeFloor,
      thrRow,
      rawRow,
      rbTls,
      ngxTls,
      floorTls,
      thrTls,
      rawTls,
    };
  };
  const named = (rs: Result[], suffix: string) => Object.fromEntries(rs.map((r, i) => [`${peers[i].name}${suffix}`, r])) as Record<string, Result>;
  // with --forwarded a round has only its first rows; the rest are then never read
  type Round = Extract<Awaited<ReturnType<typeof round>>, { viaNginx: unknown }>;
  const rounds: Round[] = [];
  for (let i = 0; i < repeat; i++) rounds.push((await round()) as Round);
  const median = (rs: Result[]): Result | undefined => {
    if (rs.length === 0) return undefined;
    const sorted = [...rs].sort((a, b) => a.rps - b.rps);
    const med = sorted[Math.floor(sorted.length / 2)];
    return { ...med, spread: rs.length > 1 ? (sorted[sorted.length - 1].rps - sorted[0].rps) / med.rps : undefined };
  };
  const pick = <K extends keyof Round>(k: K): Round[K] => median(rounds.map((r) => r[k]).filter((r) => !!r) as Result[]) as Round[K];
  /** A peer's row: `caddy`, `haproxyTls`… */
  const peer = (k: string): Result => median(rounds.map((r) => r.peerRows[k]))!;
  const direct = pick('direct');
  const rootbox = pick('rootbox');
  const forwarded = pick('forwarded');
  const rootbox1 = pick('rootbox1');
  const forwarded1 = pick('forwarded1');
  const viaFull = pick('viaFull');
  const viaNginx = pick('viaNginx');
  const library = pick('library');
  const ownFwd = pick('ownFwd');
  const viaUndici = pick('viaUndici');
  const nodeFloor = pick('nodeFloor');
  const thrRow = pick('thrRow');
  const rawRow = pick('rawRow');
  const thrTls = pick('thrTls');
  const rawTls = pick('rawTls');
  const tlsRows = tls ? { rootbox: pick('rbTls')!, nginx: pick('ngxTls')!, floor: pick('floorTls')! } : undefined;

  const row = (name: string, r: Result) =>
    `${name.padEnd(9)} ${r.rps.toFixed(0).padStart(9)} req/s   p50 ${r.p50.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms   ${r.cpuUs ? `proxy CPU ${r.cpuUs.toFixed(1)} µs/req (user ${r.userUs!.toFixed(1)}; ${(r.core! * 100).toFixed(0)}% of a core)   ` : ''}${r.spread !== undefined ? `spread ±${((r.spread * 100) / 2).toFixed(0)}%   ` : ''}errors: ${r.errors}`;
  console.log(
    `bench/proxy — ${duration}s per run, ${connections} connections, wrk -t1, nginx workers ${nginxWorkers}, app ${target}${inContainer ? ' (nginx in a runc container, through a real daemon)' : ''}, ${pin ? `proxies on CPU ${proxyCpu}, wrk and app on CPU ${loadCpu}` : 'not pinned'}, node ${process.version}`,
  );
  console.log(row('direct', direct));
  console.log(row('rootbox', rootbox));
  console.log(row('forwarded', forwarded) + '   (edge B → channel → A → app; CPU of both hosts)');
  console.log(row('rootbox 1', rootbox1) + '   (one connection)');
  console.log(row('fwd 1', forwarded1) + '   (one connection)');
  console.log(
    `forwarded / rootbox throughput ${(forwarded.rps / rootbox.rps).toFixed(2)}x (target ≥ 0.45x)   CPU per request ${(forwarded.cpuUs! / rootbox.cpuUs!).toFixed(2)}x   added p50 at one connection ${(forwarded1.p50 - rootbox1.p50).toFixed(2)} ms (target ≤ +1 ms; under ${connections} connections ${(forwarded.p50 - rootbox.p50).toFixed(2)} ms)`,
  );
  if (viaFull) {
    console.log(row('fwd full', viaFull) + "   (no raw lane: node's server, the front's full path over HTTP/2)");
    console.log(
      `channel paths: raw lane / full path throughput ${(forwarded.rps / viaFull.rps).toFixed(2)}x   CPU per request raw / full ${(forwarded.cpuUs! / viaFull.cpuUs!).toFixed(2)}x`,
    );
  }
  if (onlyForwarded) return;
  console.log(row('nginx', viaNginx));
  for (const p of peers) console.log(row(p.name, peer(p.name)) + '   (one core, as nginx)');
  console.log(row('hp3 only', library) + '   (http-proxy-3 alone: no edge, no policy)');
  console.log(row('fwd only', ownFwd) + "   (rootbox's forwarder on bare node:http: no edge, no site lookup)");
  console.log(row('undici', viaUndici) + '   (undici Pool on bare node:http)');
  console.log(row('floor', nodeFloor) + '   (node:http answering by itself: no proxying)');
  if (rawRow) console.log(row('raw', rawRow) + '   (prototype: HTTP/1.1 front without node:http)');
  if (thrRow) console.log(row(`rb ${threads}thr`, thrRow) + `   (prototype: edge + proxy in ${threads} worker threads, CPUs ${threadCpus})`);
  if (tlsRows) {
    console.log(row('rb TLS', tlsRows.rootbox));
    console.log(row('ngx TLS', tlsRows.nginx));
    for (const p of peers) console.log(row(`${p.name.slice(0, 5)} TLS`, peer(`${p.name}Tls`)));
    console.log(row('floor TLS', tlsRows.floor) + '   (node answering by itself over TLS, as the edge listens)');
    if (rawTls) console.log(row('raw TLS', rawTls) + '   (prototype over node:tls)');
    if (thrTls) console.log(row(`${threads}thr TLS`, thrTls) + `   (prototype: ${threads} worker threads over TLS)`);
  }
  console.log(`rootbox / nginx  throughput ${(rootbox.rps / viaNginx.rps).toFixed(2)}x (target ≥ 0.8x)   p99 ${(rootbox.p99 / viaNginx.p99).toFixed(2)}x`);
  const vs = (rb: Result, suffix: string) => peers.map((p) => `rootbox / ${p.name} ${(rb.rps / peer(`${p.name}${suffix}`).rps).toFixed(2)}x`).join('   ');
  console.log(`peers: ${vs(rootbox, '')}${tlsRows ? `   over TLS: ${vs(tlsRows.rootbox, 'Tls')}` : ''}   (throughput)`);
  console.log(
    `forwarders on bare node:http: own / nginx ${(ownFwd.rps / viaNginx.rps).toFixed(2)}x, undici / nginx ${(viaUndici.rps / viaNginx.rps).toFixed(2)}x; own / undici CPU per request ${(ownFwd.cpuUs! / viaUndici.cpuUs!).toFixed(2)}x`,
  );
  console.log(`rootbox / nginx  CPU per request ${(rootbox.cpuUs! / viaNginx.cpuUs!).toFixed(2)}x (less sensitive to other load on the machine)`);
  console.log(
    `http-proxy-3 alone / nginx throughput ${(library.rps / viaNginx.rps).toFixed(2)}x   rootbox / http-proxy-3 alone ${(rootbox.rps / library.rps).toFixed(2)}x`,
  );
  console.log(
    `node floor / nginx proxy  CPU per request ${(nodeFloor.cpuUs! / viaNginx.cpuUs!).toFixed(2)}x   rootbox / node floor ${(rootbox.cpuUs! / nodeFloor.cpuUs!).toFixed(2)}x`,
  );
  if (tlsRows)
    console.log(
      `over TLS: rootbox / nginx throughput ${(tlsRows.rootbox.rps / tlsRows.nginx.rps).toFixed(2)}x (target ≥ 0.8x)   CPU per request ${(tlsRows.rootbox.cpuUs! / tlsRows.nginx.cpuUs!).toFixed(2)}x   node floor over TLS / nginx ${(tlsRows.floor.rps / tlsRows.nginx.rps).toFixed(2)}x`,
    );
  if (rawRow)
    console.log(
      `raw prototype (one event loop, no node:http, no policy) / nginx throughput ${(rawRow.rps / viaNginx.rps).toFixed(2)}x${rawTls && tlsRows ? `, over TLS ${(rawTls.rps / tlsRows.nginx.rps).toFixed(2)}x` : ''}   CPU per request ${(rawRow.cpuUs! / viaNginx.cpuUs!).toFixed(2)}x`,
    );
  if (thrRow)
    console.log(
      `${threads} threads / nginx throughput ${(thrRow.rps / viaNginx.rps).toFixed(2)}x${thrTls && tlsRows ? `, over TLS ${(thrTls.rps / tlsRows.nginx.rps).toFixed(2)}x` : ''}`,
    );
  console.log(`rootbox / direct throughput ${(rootbox.rps / direct.rps).toFixed(2)}x   nginx / direct throughput ${(viaNginx.rps / direct.rps).toFixed(2)}x`);
}

/** The short-lived commands under way (wrk, taskset): ended with the helpers on an interrupt. */
const running = new Set<ChildProcess>();
// an interrupt (Ctrl-C, a timeout's SIGTERM) ends the run the way its end does: helpers, nginx, the
// peers and wrk are told to stop, not left behind on the machine
for (const sig of ['SIGINT', 'SIGTERM'] as const)
  process.once(sig, () => {
    for (const c of running) c.kill('SIGTERM');
    void cleanUp().then(() => process.exit(130));
  });

try {
  await main();
} finally {
  await cleanUp();
}

async function cleanUp(): Promise<void> {
  // every helper cleans up after itself (the container one deletes its server): wait for them
  const exited = children.map((c) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', r))));
  for (const c of children) if (c.pid && c.exitCode === null) c.kill('SIGTERM');
  await Promise.race([Promise.all(exited), new Promise((r) => setTimeout(r, 30_000))]);
  rmSync(dir, { recursive: true, force: true });
}
