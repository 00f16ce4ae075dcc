// bench/wake/doze.ts: what a doze costs and gives, with real runc containers behind a real daemon
// of its own (test daemon: own bridge, subnet, uid ranges, data dir; everything deleted at the end;
// doze on, idleTimeout 300 ms):
//   1. doze → first byte of a minimal run.sh app through the edge (issue 35's goal: p50 ≤ 2 ms), beside the
//      same request awake (back to back, and after as long a pause as a doze's with the server
//      held awake: the part of the gap that is idleness, not the thaw), and the freezer's own
//      thaw (one cgroup write, the floor) and Runtime.thaw (the same through the runtime's per-server queue); and the app alone, no
//      daemon in the way: a request straight to its address just after a raw thaw (thaw write
//      included), the same with the request connected and sent before the thaw (what a proxy
//      that connects or forwards while it thaws could gain at most), and awake — the part of
//      the doze → first byte gap that is the kernel's and the thawed app's, not the proxy's; and
//      the same doze → first byte over HTTPS, a new TLS connection (full handshake, HTTP/1.1) per
//      request, beside it awake (the thaw starts at the ClientHello's server name); and the
//      doze → first byte and the awake request from a client in a process of its own, as a real
//      client is (the other rows' client shares the daemon's event loop and adds its own work to it);
//   2. host memory held by N (100) dozing servers of an idle `python3 -m http.server` app: the
//      sum of their cgroups' memory and the drop of host MemAvailable from before they existed;
//   3. how fast the memory floor stops them when a memory hog needs room: a host process grows
//      until MemAvailable is below the floor by half of what the dozing servers took from it (64 to
//      512 MiB); the time until MemAvailable is back above it and how many dozing servers were
//      stopped (least recently used first) to get there.
// dozeRows() returns the printed rows (bench/wake/run.ts prints them among its own); run alone:
//   node --import tsx bench/wake/doze.ts [--dozes 30] [--servers 100]   (--servers 0: only part 1)

import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { request as tlsRequest } from 'node:https';
import { connect } from 'node:net';
import { loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { startTestDaemon, type TestDaemon } from '../../test/helpers/daemon.js';
import { sh } from '../../test/runtime/helpers/env.js';
import type { ContainerRuntime } from '../../src/runtime/index.js';
import { hostMemAvailable } from '../../src/presence/floor.js';
import { thaw } from '../../src/runtime/freezer.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[], digits = 1) =>
  `p50 ${pct(xs, 50).toFixed(digits).padStart(6)} ms   p90 ${pct(xs, 90).toFixed(digits).padStart(6)} ms   (n=${xs.length})`;
const row = (label: string, value: string) => `${label.padEnd(40)}${value}`;

const APP_SH = `#!/bin/bash
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
const IDLE_PY_SH = '#!/bin/bash\ncd /root && exec python3 -m http.server 80\n';
const HOG_PY = `
import sys
held = []
for line in sys.stdin:
    held.append(bytearray(b"\\x01") * (int(line) << 20))
    print("ok", flush=True)
`;

function firstByte(port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const r = request({ host: '127.0.0.1', port, path: '/', headers: { host }, agent: false }, (res) => {
      const t = performance.now() - t0;
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(t) : reject(new Error(`${host}: status ${res.statusCode}`))));
    });
    r.on('error', reject);
    r.end();
  });
}

/** firstByte over HTTPS: a new TLS connection (SNI `host`, full handshake, HTTP/1.1) per request. */
function firstByteTls(port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const o = { host: '127.0.0.1', port, path: '/', servername: host, headers: { host }, agent: false as const, rejectUnauthorized: false };
    const r = tlsRequest(o, (res) => {
      const t = performance.now() - t0;
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(t) : reject(new Error(`${host}: status ${res.statusCode}`))));
    });
    r.on('error', reject);
    r.end();
  });
}

/** A client in a process of its own (a real client is not on the daemon's event loop): `GET /` with
 *  a new connection per line asked; answers the time to the response's first byte as it measured it. */
const CLIENT_JS = `
const http = require('node:http');
require('node:readline').createInterface({ input: process.stdin }).on('line', (l) => {
  const [port, host] = l.split(' ');
  const t0 = performance.now();
  const r = http.request({ host: '127.0.0.1', port: Number(port), path: '/', headers: { host }, agent: false }, (res) => {
    const t = performance.now() - t0;
    res.resume();
    res.on('end', () => process.stdout.write(res.statusCode + ' ' + t + '\\n'));
  });
  r.on('error', (e) => process.stdout.write('0 ' + e.message + '\\n'));
  r.end();
});
`;

function ownProcessClient(): { firstByte(port: number, host: string): Promise<number>; close(): void } {
  const child = spawn(process.execPath, ['-e', CLIENT_JS], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  return {
    async firstByte(port, host) {
      child.stdin!.write(`${port} ${host}\n`);
      const { value } = await lines.next();
      const [status, t] = String(value).split(' ');
      if (status !== '200') throw new Error(`${host}: ${status} ${t}`);
      return Number(t);
    },
    close: () => void child.kill('SIGKILL'),
  };
}

const accepts = (ip: string) =>
  new Promise<boolean>((resolve) => {
    const s = connect({ host: ip, port: 80 });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });

/** Time to the first byte of an answer to a bare GET sent straight to the app at `ip`:80. */
function appAlone(ip: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const c = connect({ host: ip, port: 80 });
    c.setNoDelay(true);
    c.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    c.once('data', () => (resolve(performance.now() - t0), c.destroy()));
    c.once('error', reject);
  });
}

async function until(cond: () => boolean | Promise<boolean>, ms: number, every = 5): Promise<boolean> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) return false;
    await sleep(every);
  }
  return true;
}

/** A server made through the runtime with a store record (so the edge knows its slug). */
async function server(d: TestDaemon, n: number, runSh: string): Promise<{ id: string; host: string; ip: string }> {
  const id = `srv_dozebench${n}`;
  const slug = `dozebench${n}`;
  d.daemon.store.servers.insert({
    id,
    accountId: 'acc_dozebench',
    slug,
    sshPublicKey: '',
    keyFingerprint: '',
    memoryBytes: 256 * MiB,
    diskBytes: 256 * MiB,
    neverSleep: false,
    suspended: false,
    flag: null,
    createdAt: Date.now(),
  });
  const release = d.daemon.presence.hold(id); // no doze while its app starts (idleTimeout is short)
  try {
    const s = await d.daemon.runtime.create({ id, slug, memoryBytes: 256 * MiB, diskBytes: 256 * MiB });
    const w = await sh(d.daemon.runtime, id, `cat > /root/run.sh && chmod +x /root/run.sh`, runSh);
    if (w.code !== 0) throw new Error(w.err);
    if (!(await until(() => accepts(s.ip), 60_000, 50))) throw new Error(`${id}: the app did not start`);
    return { id, host: `${slug}.localhost`, ip: s.ip };
  } finally {
    release();
  }
}

export async function dozeRows(_ctx?: unknown): Promise<string[]> {
  const DOZES = Number(arg('dozes', '30'));
  const SERVERS = Number(arg('servers', '100'));
  const rows: string[] = [];
  const avail0 = hostMemAvailable();
  // the floor sits below what the servers will take, so that only the hog crosses it
  const floor = avail0 - SERVERS * 40 * MiB - 1024 * MiB;
  const d = await startTestDaemon({
    publicIp: '127.0.0.1',
    log: { level: 'warn' },
    proxy: { idleTimeout: 300, idleCheckInterval: 50, dozeTimeout: '1h', dozeMemoryFloor: floor },
    runtime: { uidStart: 3_900_000_000 + (process.pid % 11) * 65536 * 128, uidRanges: SERVERS + 8 },
  });
  const rt = d.daemon.runtime as ContainerRuntime;
  const presence = d.daemon.presence;
  try {
    // 1. doze → first byte
    const app = await server(d, 0, APP_SH);
    const awake: number[] = [];
    for (let i = 0; i < DOZES; i++) awake.push(await firstByte(d.http, app.host));
    // the same request after as long a pause as a doze's, the server held awake meanwhile: what is
    // left of the doze's gap beside this is the thaw's, not the pause's (cold caches, a host idle)
    /** `measure` after as long a pause as a doze's, the server held awake meanwhile. */
    const afterPause = async (measure: () => Promise<number>): Promise<number> => {
      const release = presence.hold(app.id);
      try {
        await sleep(350);
        return await measure();
      } finally {
        release();
      }
    };
    const pausedAwake: number[] = [];
    for (let i = 0; i < DOZES; i++) pausedAwake.push(await afterPause(() => firstByte(d.http, app.host)));
    const dozeWake: number[] = [];
    for (let i = 0; i < DOZES; i++) {
      if (!(await until(() => presence.isDozing(app.id), 10_000))) throw new Error('the app server did not doze');
      await sleep(20);
      dozeWake.push(await firstByte(d.http, app.host));
    }
    const awakeTls: number[] = [];
    for (let i = 0; i < DOZES; i++) awakeTls.push(await firstByteTls(d.https, app.host));
    const dozeWakeTls: number[] = [];
    for (let i = 0; i < DOZES; i++) {
      if (!(await until(() => presence.isDozing(app.id), 10_000))) throw new Error('the app server did not doze');
      await sleep(20);
      dozeWakeTls.push(await firstByteTls(d.https, app.host));
    }
    // the same doze → first byte and awake request from a client in its own process
    const client = ownProcessClient();
    const ownAwake: number[] = [];
    const ownDoze: number[] = [];
    try {
      for (let i = 0; i < 3; i++) await client.firstByte(d.http, app.host); // its code warm
      for (let i = 0; i < DOZES; i++) {
        if (!(await until(() => presence.isDozing(app.id), 10_000))) throw new Error('the app server did not doze');
        await sleep(20);
        ownDoze.push(await client.firstByte(d.http, app.host));
        ownAwake.push(await client.firstByte(d.http, app.host));
      }
    } finally {
      client.close();
    }
    const thawRaw: number[] = [];
    const thawRt: number[] = [];
    const idle = () => until(() => presence.isDozing(app.id), 10_000);
    for (let i = 0; i < DOZES; i++) {
      await idle(); // frozen by the tracker: thaw it under its feet, then let it see a touch
      const t0 = performance.now();
      thaw(rt.cgroup(app.id));
      thawRaw.push(performance.now() - t0);
      await firstByte(d.http, app.host);
      await idle();
      const t1 = performance.now();
      await rt.thaw(app.id);
      thawRt.push(performance.now() - t1);
      await firstByte(d.http, app.host);
    }
    const aloneThawed: number[] = [];
    const aloneSentFirst: number[] = [];
    const aloneAwake: number[] = [];
    for (let i = 0; i < 2 * DOZES; i++) {
      await idle();
      if (i % 2 === 0) {
        const t0 = performance.now();
        thaw(rt.cgroup(app.id));
        const t = performance.now() - t0;
        aloneThawed.push(t + (await appAlone(app.ip)));
      } else {
        const answered = appAlone(app.ip); // connected and sent: the kernel queues both for the frozen app
        await new Promise((r) => setImmediate(r));
        thaw(rt.cgroup(app.id));
        aloneSentFirst.push(await answered);
      }
      aloneAwake.push(await appAlone(app.ip));
      await firstByte(d.http, app.host); // the tracker sees it: it thaws (already done) and dozes it again
    }
    // the app alone after as long a pause, held awake: the part of a pause's cost that is the host's
    // (idle CPUs, cold caches) and not the daemon's
    const alonePaused: number[] = [];
    for (let i = 0; i < DOZES; i++) alonePaused.push(await afterPause(() => appAlone(app.ip)));
    rows.push(row('doze → first byte', fmt(dozeWake)));
    rows.push(row('  same request, awake', fmt(awake)));
    rows.push(row('  awake after as long a pause', fmt(pausedAwake)));
    rows.push(row('  freezer thaw (one cgroup write)', fmt(thawRaw, 3)));
    rows.push(row('  Runtime.thaw', fmt(thawRt, 3)));
    rows.push(row('  app alone, thaw then request', fmt(aloneThawed, 2)));
    rows.push(row('  app alone, request then thaw', fmt(aloneSentFirst, 2)));
    rows.push(row('  app alone, awake', fmt(aloneAwake, 2)));
    rows.push(row('  app alone, awake after a pause', fmt(alonePaused, 2)));
    rows.push(row('doze → first byte, client process', fmt(ownDoze)));
    rows.push(row('  same request, awake', fmt(ownAwake)));
    rows.push(row('doze → first byte, HTTPS (new TLS)', fmt(dozeWakeTls)));
    rows.push(row('  same request, awake', fmt(awakeTls)));

    if (SERVERS <= 0) return rows; // --servers 0: the doze → first byte rows only

    // 2. memory of N dozing idle python servers
    const before = hostMemAvailable();
    const made: { id: string }[] = [];
    const t0 = Date.now();
    for (let i = 1; i <= SERVERS; i += 4)
      made.push(...(await Promise.all([0, 1, 2, 3].filter((k) => i + k <= SERVERS).map((k) => server(d, i + k, IDLE_PY_SH)))));
    const madeS = (Date.now() - t0) / 1000;
    for (const s of made) {
      presence.touch(s.id); // least recently used: the first made
      await sleep(2);
    }
    await until(() => made.every((s) => presence.isDozing(s.id)), 60_000, 50);
    await sleep(1000);
    const dozing = made.filter((s) => presence.isDozing(s.id)).length;
    let cg = 0;
    for (const s of made) cg += (await rt.stats(s.id)).memoryBytes;
    const drop = before - hostMemAvailable();
    rows.push(
      row(
        `${SERVERS} dozing python http.server`,
        `${dozing} dozing; cgroups hold ${(cg / MiB).toFixed(0)} MiB (${(cg / MiB / SERVERS).toFixed(1)} MiB each); host MemAvailable down ${(drop / MiB).toFixed(0)} MiB (made in ${madeS.toFixed(0)} s)`,
      ),
    );

    // 3. the memory floor against a hog
    const hog = spawn('python3', ['-c', HOG_PY], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      const lines = createInterface({ input: hog.stdout! })[Symbol.asyncIterator]();
      // under the floor by half of what the dozing servers hold (at most 512 MiB): stopping some of them is enough
      // (by the host's own count: their cgroups also hold the image's page cache, which they share)
      const under = Math.max(64 * MiB, Math.min(512 * MiB, drop / 2));
      const t = performance.now();
      let grown = 0;
      while (hostMemAvailable() > floor - under) {
        const step = Math.max(32, Math.min(256, Math.floor((hostMemAvailable() - floor + under) / MiB)));
        hog.stdin!.write(`${step}\n`);
        await lines.next();
        grown += step * MiB;
      }
      const crossed = performance.now();
      const below = hostMemAvailable();
      const back = await until(() => hostMemAvailable() >= floor, 60_000, 5);
      const done = performance.now();
      const stopped = made.filter((s) => rt.get(s.id)?.state === 'sleeping').length;
      const order = made.map((s, i) => (rt.get(s.id)?.state === 'sleeping' ? i : -1)).filter((i) => i >= 0);
      const lruFirst = order.every((v, i) => v === i);
      rows.push(
        row(
          'memory floor vs a hog',
          `hog ${(grown / MiB).toFixed(0)} MiB in ${((crossed - t) / 1000).toFixed(1)} s, ${((floor - below) / MiB).toFixed(0)} MiB under the floor; ` +
            (back
              ? `back above it ${(done - crossed).toFixed(0)} ms later, ${stopped} servers stopped${lruFirst ? ' (the least recently used ones)' : ' (NOT a prefix of LRU order)'}`
              : `still under it after 60 s (${stopped} stopped)`),
        ),
      );
    } finally {
      hog.kill('SIGKILL');
    }
  } finally {
    await d.stop();
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const load = () =>
    loadavg()
      .map((x) => x.toFixed(2))
      .join(' ');
  const before = load();
  for (const l of await dozeRows()) console.log(l);
  console.log(`load average: ${before} at the start, ${load()} at the end (2 cores, shared host)`);
}
