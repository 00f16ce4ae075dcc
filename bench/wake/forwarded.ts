// bench/wake/forwarded.ts: a cold wake through another host (issue 29) beside the same wake
// through the owner's own edge, in one run: two daemons (real runc containers, a real PostgreSQL
// registry, the mutual-TLS channel between them) — host A runs a minimal run.sh app, host B does
// not; each round puts the app to sleep (Runtime.stop, parked as the daemon parks) and times the
// first byte of one request through A's edge, then again through B's (client → B's edge → channel →
// A wakes its server → answer), the order swapped every round. The same two requests with the app
// awake give the forwarding's own cost. Both wake rows run in cluster mode (a wake checks the
// registry's fence first), so their ratio is what the extra hop adds.
// forwardedRows() returns the printed rows (bench/wake/run.ts prints them among its own); run alone:
//   node --import tsx bench/wake/forwarded.ts [--wakes 20]

import { request } from 'node:http';
import type { ContainerRuntime } from '../../src/runtime/index.js';
import type { TestDaemon } from '../../test/helpers/daemon.js';
import type { TestPostgres } from '../../test/helpers/postgres.js';
import { api, startClusterRegistry, startHost } from '../../test/registry/fixtures/twohosts.js';
import { sh } from '../../test/runtime/helpers/env.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1).padStart(6)} ms   p90 ${pct(xs, 90).toFixed(1).padStart(6)} ms   (n=${xs.length})`;
const row = (label: string, xs: number[]) => `${label.padEnd(35)}${fmt(xs)}`;

/** A one-connection-at-a-time HTTP server on :80 in python3 (the image has no web server), answering a fixed word. */
const RUN_SH = `#!/bin/bash
exec python3 -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(128)
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nContent-Length: 5\\r\\n\\r\\nhello")
    except Exception:
        pass
    c.close()
'
`;

/** ms to the first byte of one GET on a connection of its own; rejects unless 200 "hello". */
function firstByte(port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const r = request({ host: '127.0.0.1', port, path: '/', headers: { host }, agent: false }, (res) => {
      const t = performance.now() - t0;
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => (res.statusCode === 200 && body === 'hello' ? resolve(t) : reject(new Error(`${host}: ${res.statusCode} ${body.slice(0, 200)}`))));
    });
    r.on('error', reject);
    r.end();
  });
}

export async function forwardedRows(o: { wakes?: number; park?: boolean } = {}): Promise<string[]> {
  const wakes = o.wakes ?? 20;
  let pg: TestPostgres | undefined;
  let a: TestDaemon | undefined;
  let b: TestDaemon | undefined;
  try {
    pg = await startClusterRegistry();
    const over = { log: { level: 'warn' }, proxy: { idleTimeout: '1h' }, runtime: { parkOnSleep: o.park === false ? 'off' : 'on' } };
    a = await startHost(pg, 'bench-a', over);
    b = await startHost(pg, 'bench-b', over);
    const slug = `fw${process.pid.toString(36)}`;
    const made = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
    if (made.status !== 200) throw new Error(`create: ${made.status} ${made.text}`);
    const id = made.json.id as string;
    const host = `${slug}.localhost`;
    const rt = a.daemon.runtime as ContainerRuntime;
    const w = await sh(rt, id, 'cat > /root/run.sh && chmod +x /root/run.sh', RUN_SH);
    if (w.code !== 0) throw new Error(w.err);
    const viaA = a.http;
    const viaB = b.http;
    for (let i = 0; ; i++) {
      const ok = await firstByte(viaA, host).then(
        () => true,
        () => false,
      );
      if (ok) break;
      if (i > 300) throw new Error('the app never answered');
      await new Promise((r) => setTimeout(r, 100));
    }
    // awake: the same requests, to see the hop's own cost (B's session to A opens here)
    const awakeA: number[] = [];
    const awakeB: number[] = [];
    for (let i = 0; i < 10; i++) await firstByte(viaB, host); // warm-up
    for (let i = 0; i < 50; i++) {
      awakeA.push(await firstByte(viaA, host));
      awakeB.push(await firstByte(viaB, host));
    }
    const local: number[] = [];
    const forwarded: number[] = [];
    const wake = async (port: number, into: number[]) => {
      await rt.stop(id);
      if (rt.get(id)?.state !== 'sleeping') throw new Error(`not asleep: ${rt.get(id)?.state}`);
      into.push(await firstByte(port, host));
    };
    for (let i = 0; i < wakes; i++) {
      if (i % 2 === 0) await wake(viaA, local).then(() => wake(viaB, forwarded));
      else await wake(viaB, forwarded).then(() => wake(viaA, local));
    }
    const ratio = (x: number[], y: number[]) => {
      const d = pct(x, 50) - pct(y, 50);
      return `${(pct(x, 50) / pct(y, 50)).toFixed(2)}x (${d >= 0 ? '+' : ''}${d.toFixed(1)} ms at p50)`;
    };
    return [
      `two hosts, one registry (cluster mode: a wake checks the registry's fence), run.sh app on A, sleeping ${o.park === false ? 'not parked' : 'parked'}:`,
      row('  cold sleep → first byte, via A', local),
      row('  cold sleep → first byte, via B', forwarded),
      `  wake through another host / local wake: ${ratio(forwarded, local)}`,
      row('  awake → first byte, via A', awakeA),
      row('  awake → first byte, via B', awakeB),
      `  awake through another host / local: ${ratio(awakeB, awakeA)}`,
    ];
  } finally {
    await b?.stop();
    await a?.stop();
    await pg?.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const l of await forwardedRows({ wakes: Number(arg('wakes', '20')), park: !process.argv.includes('--no-park') })) console.log(l);
}
