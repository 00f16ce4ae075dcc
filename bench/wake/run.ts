// bench/wake: what a visitor waits for when a server sleeps, with real runc containers behind a
// real daemon (test daemon: its own bridge, subnet and data dir; everything deleted at the end).
// In one run:
//   1. doze → first byte (rows of ./doze.ts, when that file is there: the freezer's own thaw time
//      is its floor), target p50 ≤ 5 ms;
//   2. cold sleep → first byte of a minimal run.sh app through the edge, target p50 ≤ 60 ms,
//      beside the same request to the same server awake;
//   3. where a cold wake's time goes: Runtime.start step by step (the runtime's trace hook:
//      store, mounts and namespaces — kept across sleep, so only checked —, runc create, runc
//      start) with each step's share, then the app's own start (Runtime.start → port 80 accepts,
//      probed every 1 ms from the host) and the rest (the proxy's port wait and forwarding);
//   4. static /root/www page of a sleeping server (target p50 ≤ 5 ms), beside the edge's own
//      /healthz (the cheapest answer the daemon gives);
//   5. a cold wake through another host (rows of ./forwarded.ts: two daemons in cluster mode with
//      a PostgreSQL registry; client → B's edge → channel → A wakes its server → answer) beside
//      the same wake through A's own edge, as a ratio.
// The host is shared: expect noise; the load average at the start and end is printed.
//
// Sleeping servers are parked (runtime.parkOnSleep, their container made at sleep time) unless
// --no-park: then a cold wake runs runc create as well.
//
// Usage: node --import tsx bench/wake/run.ts [--wakes 20] [--static 200] [--no-doze] [--no-park] [--no-forwarded]

import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { loadavg } from 'node:os';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import { sh } from '../../test/runtime/helpers/env.js';
import type { ContainerRuntime } from '../../src/runtime/index.js';
import { forwardedRows } from './forwarded.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const WAKES = Number(arg('wakes', '20'));
const STATIC = Number(arg('static', '200'));

/** A minimal HTTP server on :80 in Python (the image has python3-minimal: no http.server,
 *  no web server), answering /root/www/index.html. */
const RUN_SH = `#!/bin/bash
exec python3 -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(128)
body = open("/root/www/index.html", "rb").read()
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    except Exception:
        pass
    c.close()
'
`;

function firstByte(port: number, host: string, path = '/'): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const r = request({ host: '127.0.0.1', port, path, headers: { host }, agent: false }, (res) => {
      const t = performance.now() - t0;
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(t) : reject(new Error(`${host}${path}: status ${res.statusCode}`))));
    });
    r.on('error', reject);
    r.end();
  });
}

const accepts = (ip: string) =>
  new Promise<boolean>((resolve) => {
    const s = connect({ host: ip, port: 80 });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1).padStart(6)} ms   p90 ${pct(xs, 90).toFixed(1).padStart(6)} ms   (n=${xs.length})`;
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/** The doze rows (bench/wake/doze.ts, written with the doze feature), when that file exists. */
async function doze(ctx: Record<string, unknown>): Promise<string[]> {
  const file = new URL('./doze.ts', import.meta.url);
  if (!existsSync(file)) return ['doze → first byte                 (bench/wake/doze.ts not there yet: no doze rows)'];
  const mod = (await import(file.href)) as { dozeRows?: (ctx?: Record<string, unknown>) => Promise<unknown> };
  if (typeof mod.dozeRows !== 'function') return ['doze → first byte                 (bench/wake/doze.ts exports no dozeRows)'];
  let rows: unknown;
  try {
    rows = await mod.dozeRows(ctx);
  } catch (e) {
    return [`doze → first byte                 (dozeRows failed: ${(e as Error).message})`];
  }
  if (Array.isArray(rows)) return rows.map((r) => (typeof r === 'string' ? r : JSON.stringify(r)));
  return [typeof rows === 'string' ? rows : JSON.stringify(rows)];
}

const loadBefore = load();
const d = await startTestDaemon({
  publicIp: '127.0.0.1',
  log: { level: 'warn' },
  hosting: { anonServersPerIp: 5, rateLimit: { createsPerIpPerHour: 1000 } },
  proxy: { idleTimeout: '1h' },
  runtime: { parkOnSleep: process.argv.includes('--no-park') ? 'off' : 'on' },
});
let stopped = false;
const stop = async () => {
  if (!stopped) ((stopped = true), await d.stop());
};
try {
  const create = async (key?: string) => {
    const body = await new Promise<string>((resolve, reject) => {
      const r = request(
        {
          host: '127.0.0.1',
          port: d.http,
          path: '/create',
          method: 'POST',
          headers: { host: 'api.localhost', ...(key ? { authorization: `Bearer ${key}` } : {}) },
        },
        (res) => {
          let b = '';
          res.on('data', (c) => (b += c));
          res.on('end', () => resolve(b));
        },
      );
      r.on('error', reject);
      r.end();
    });
    const j = JSON.parse(body);
    const slug = d.daemon.store.servers.get(j.id)!.slug;
    return { id: j.id as string, host: `${slug}.localhost`, key: (key ?? j.api_key) as string };
  };
  const rt = d.daemon.runtime as ContainerRuntime;

  // the run.sh server
  const app = await create();
  const w = await sh(rt, app.id, `mkdir -p /root/www && echo hello > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh`, RUN_SH);
  if (w.code !== 0) throw new Error(w.err);
  for (let i = 0; i < 100; i++) {
    if (
      await firstByte(d.http, app.host).then(
        () => true,
        () => false,
      )
    )
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const awake: number[] = [];
  for (let i = 0; i < 50; i++) awake.push(await firstByte(d.http, app.host));

  // cold sleep → first byte through the edge; in the same wakes, Runtime.start's steps (its
  // trace hook) and when port 80 first accepts (probed every 1 ms from the host once
  // Runtime.start has returned), so each wake splits into: before start (edge, proxy, presence),
  // Runtime.start, the app's own start, and the rest (the proxy noticing the port, forwarding)
  const steps = new Map<string, number[]>();
  const add = (k: string, ms: number) => (steps.get(k) ?? steps.set(k, []).get(k)!).push(ms);
  const woken: number[] = [];
  const split = { before: [] as number[], start: [] as number[], app: [] as number[], rest: [] as number[], other: [] as number[] };
  const ip = rt.get(app.id)!.ip;
  const startOf = rt.start.bind(rt);
  for (let i = 0; i < WAKES; i++) {
    await rt.stop(app.id);
    let began = 0;
    let returned = 0;
    let stepSum = 0;
    let listening: Promise<number> | undefined;
    rt.trace = (step, ms) => (add(step, ms), step.includes('beside') ? 0 : (stepSum += ms));
    rt.start = async (id: string) => {
      began = performance.now();
      await startOf(id);
      returned = performance.now();
      listening = (async () => {
        while (!(await accepts(ip))) await new Promise((r) => setTimeout(r, 1));
        return performance.now();
      })();
    };
    try {
      const t0 = performance.now();
      const fb = await firstByte(d.http, app.host);
      const listened = await listening!;
      woken.push(fb);
      split.before.push(began - t0);
      split.start.push(returned - began);
      split.other.push(returned - began - stepSum);
      split.app.push(listened - returned);
      split.rest.push(t0 + fb - listened);
    } finally {
      rt.trace = undefined;
      rt.start = startOf;
    }
  }

  // what a parked server holds while it sleeps: its waiting runc init (cgroup memory, private RSS)
  await rt.stop(app.id);
  const parkedRow = (() => {
    const p = rt.parked().find((x) => x.id === app.id);
    const pid = rt.runc.createdInit(app.id);
    if (!p || !pid) return 'parked server holds                (not parked)';
    const rss = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
    return `parked server holds                cgroup memory ${(p.memoryBytes / 2 ** 20).toFixed(1)} MiB; its init: RssAnon ${rss('RssAnon').toFixed(1)} MiB, VmRSS ${rss('VmRSS').toFixed(1)} MiB`;
  })();

  // static page of a sleeping server
  const site = await create(app.key);
  const s = await sh(rt, site.id, 'mkdir -p /root/www && echo "<p>static</p>" > /root/www/index.html');
  if (s.code !== 0) throw new Error(s.err);
  await rt.stop(site.id);
  const stat: number[] = [];
  const health: number[] = [];
  for (let i = 0; i < 20; i++) await firstByte(d.http, site.host); // warm-up
  for (let i = 0; i < STATIC; i++) {
    stat.push(await firstByte(d.http, site.host));
    health.push(await firstByte(d.http, 'api.localhost', '/healthz'));
  }
  if (rt.get(site.id)?.state !== 'sleeping') throw new Error('the static site was woken');

  const total = pct(woken, 50);
  const loadAfter = load();
  await stop(); // the doze rows run a daemon of their own
  const dozeLines = process.argv.includes('--no-doze') ? ['doze → first byte                 (--no-doze)'] : await doze({});
  const forwardedLines = process.argv.includes('--no-forwarded')
    ? ['wake through another host          (--no-forwarded)']
    : await forwardedRows({ wakes: WAKES, park: !process.argv.includes('--no-park') });
  console.log(
    `bench/wake — real runc containers, a minimal python3 socket server as the run.sh app; sleeping servers ${process.argv.includes('--no-park') ? 'not parked (--no-park)' : 'parked'}`,
  );
  console.log(`load average before ${loadBefore}, after the cold wakes ${loadAfter} (2 cores shared: expect noise)`);
  for (const l of dozeLines) console.log(l);
  console.log(`cold sleep → first byte            ${fmt(woken)}   target p50 ≤ 60 ms`);
  console.log(`run.sh app, awake → first byte     ${fmt(awake)}`);
  console.log(`where a cold wake goes (p50 of each part over the same wakes; share of the first byte's p50, ${total.toFixed(1)} ms):`);
  const row = (name: string, xs: number[]) => console.log(`  ${name.padEnd(40)} ${fmt(xs)}  ${((pct(xs, 50) / total) * 100).toFixed(0).padStart(4)}%`);
  row('request → Runtime.start (edge, proxy)', split.before);
  row('Runtime.start', split.start);
  for (const [name, xs] of steps) row(`  ${name}`, xs);
  row('  (untimed: queue, record, view)', split.other);
  row('app start: → port 80 accepts', split.app);
  row('rest: proxy notices the port, forwards', split.rest);
  console.log(parkedRow);
  console.log(`static page, server asleep         ${fmt(stat)}   target p50 ≤ 5 ms`);
  console.log(`edge /healthz (peer)               ${fmt(health)}`);
  console.log(`static / healthz p50 ratio ${(pct(stat, 50) / pct(health, 50)).toFixed(2)}x`);
  for (const l of forwardedLines) console.log(l);
} finally {
  await stop();
}
