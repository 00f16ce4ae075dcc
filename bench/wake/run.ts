// bench/wake: what a visitor waits for when a server sleeps, with real runc containers behind a
// real daemon (test daemon: its own bridge, subnet and data dir; everything deleted at the end).
//   1. run.sh server asleep → first byte of the answer through the edge (target p50 ≤ 100 ms),
//      beside the same request to the same server awake, and Runtime.start alone.
//   2. static /root/www page of a sleeping server (target p50 ≤ 5 ms), beside the edge's own
//      /healthz (the cheapest answer the daemon gives).
//
// Usage: node --import tsx bench/wake/run.ts [--wakes 15] [--static 300]

import { request } from 'node:http';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import { sh } from '../../test/runtime/helpers/env.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const WAKES = Number(arg('wakes', '15'));
const STATIC = Number(arg('static', '300'));

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

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1).padStart(6)} ms   p90 ${pct(xs, 90).toFixed(1).padStart(6)} ms   (n=${xs.length})`;

const d = await startTestDaemon({
  publicIp: '127.0.0.1',
  log: { level: 'warn' },
  hosting: { anonServersPerIp: 5, rateLimit: { createsPerIpPerHour: 1000 } },
  proxy: { idleTimeout: '1h' },
});
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
  const rt = d.daemon.runtime;

  // 1. run.sh server
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
  const woken: number[] = [];
  const starts: number[] = [];
  for (let i = 0; i < WAKES; i++) {
    await rt.stop(app.id);
    woken.push(await firstByte(d.http, app.host));
    await rt.stop(app.id);
    const t0 = performance.now();
    await rt.start(app.id);
    starts.push(performance.now() - t0);
  }

  // 2. static page of a sleeping server
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

  console.log('bench/wake — real runc containers, a minimal python3 socket server as the run.sh app');
  console.log(`run.sh app, asleep → first byte   ${fmt(woken)}   target p50 ≤ 100 ms`);
  console.log(`run.sh app, awake  → first byte   ${fmt(awake)}`);
  console.log(`Runtime.start alone (runc)        ${fmt(starts)}`);
  console.log(`wake overhead over Runtime.start  p50 ${(pct(woken, 50) - pct(starts, 50)).toFixed(1)} ms (app start + port wait + proxying)`);
  console.log(`static page, server asleep        ${fmt(stat)}   target p50 ≤ 5 ms`);
  console.log(`edge /healthz (peer)              ${fmt(health)}`);
  console.log(`static / healthz p50 ratio ${(pct(stat, 50) / pct(health, 50)).toFixed(2)}x`);
} finally {
  await d.stop();
}
