// A request to a dozing server through the real edge and proxy, with servers whose "container" is
// a plain process frozen by SIGSTOP (ProcessRuntime) and an idle tracker with doze on: a thaw
// keeps what the proxy knew of the app (no readiness probe; the one connection opened while the
// server dozed, which the kernel completes without the frozen app, is the one the request goes
// over; a thaw for anything else closes it), while an app that died while frozen, and a server stopped
// after its doze, still get the probe and wait for the app to listen. A look at run.sh made once a
// server dozes holds while it dozes, and a TLS ClientHello naming a dozing server thaws it. A thaw
// that fails (the request already on its way to the frozen app) ends the request with the wake
// page at once; one that waits behind other work queued for the server (thawsAtOnce false) is
// waited for before the request goes to the app.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, closeSync, constants, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { createServer as httpServer, type Server } from 'node:http';
import { createServer as tcpServer, connect, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { connect as tlsConnect } from 'node:tls';
import { join } from 'node:path';
import { createLogger } from '../../src/log/index.js';
import { IdleTracker } from '../../src/presence/index.js';
import type { Site } from '../../src/proxy/index.js';
import { get, sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from './helpers.js';
import { freePort, ProcessRuntime } from '../helpers/procruntime.js';
import { sleep, until as waitUntil } from '../helpers/wait.js';
const until = <T>(what: string, cond: () => T | Promise<T>, ms = 5000) => waitUntil(what, cond, ms, 10);

const top = mkdtempSync(join(tmpdir(), 'rbx-thaw-'));
const rt = new ProcessRuntime();
const sites = sitesOf([]);
const IDLE = 300;
const DOZE = 1500;
const tracker = new IdleTracker({
  runtime: rt,
  neverSleep: () => false,
  idleTimeout: IDLE,
  checkInterval: 30,
  dozeTimeout: DOZE,
  log: createLogger({ level: 'error', sink: () => {} }),
});
let edge: TestEdge;
const closers: (() => void)[] = [];

/** Whether something accepts a connection on 127.0.0.1:`port` now. */
const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const c = connect({ host: '127.0.0.1', port });
    c.once('connect', () => (c.destroy(), resolve(true)));
    c.once('error', () => resolve(false));
  });
const host = (s: Site) => `${s.slug}.${DOMAIN}`;

/** A sleeping server whose app will listen on `port`; the proxy reaches it at `upstreamPort` (default: the same). */
function addServer(slug: string, port: number, opts: { bindDelay?: number; upstreamPort?: number } = {}): Site {
  const rootfs = join(top, slug);
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\nexec my-app\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  rt.add(`srv_${slug}`, slug, rootfs, port, { bindDelay: opts.bindDelay ?? 0 });
  const site: Site = { id: `srv_${slug}`, slug, rootfs, upstream: { host: '127.0.0.1', port: opts.upstreamPort ?? port }, neverSleep: false, suspended: false };
  sites.list.push(site);
  return site;
}

/** A TCP relay in front of an app's port that counts the connections made to it (and can cut them all). */
async function relay(to: number): Promise<{ port: number; count: () => number; live: () => number; sent: () => number; cutAll: () => void }> {
  let n = 0;
  let bytes = 0;
  const open = new Set<Socket>();
  const srv: TcpServer = tcpServer((c) => {
    n++;
    const up = connect({ host: '127.0.0.1', port: to });
    for (const s of [c, up]) {
      open.add(s);
      s.on('error', () => {});
      s.on('close', () => (open.delete(s), c.destroy(), up.destroy()));
    }
    c.on('data', (d: Buffer) => (bytes += d.length));
    c.pipe(up).pipe(c);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  closers.push(() => (srv.close(), [...open].forEach((s) => s.destroy())));
  return {
    port: (srv.address() as AddressInfo).port,
    count: () => n,
    live: () => open.size / 2,
    sent: () => bytes,
    cutAll: () => [...open].forEach((s) => s.destroy()),
  };
}

test.before(async () => {
  edge = await startEdge({
    sites,
    runtime: rt,
    presence: tracker,
    cfg: testConfig({ wakeTimeout: '5s', publishCheckInterval: 60_000, appStartGrace: '300ms' }),
  });
  tracker.start();
});

test.after(async () => {
  tracker.stop();
  await edge?.stop();
  for (const c of closers) c();
  await rt.stopAll();
  rmSync(top, { recursive: true, force: true });
});

test('a request to a dozing server is answered after a thaw over one connection: no readiness probe, no start', async () => {
  const appPort = await freePort();
  const r = await relay(appPort);
  const s = addServer('thawed', appPort, { upstreamPort: r.port });
  // started first (the relay accepts before the app listens: its cold wake could not be probed through it);
  // held awake until it answered once (a child slower than the idle timeout to listen was frozen before it did)
  const held = tracker.hold(s.id);
  await tracker.wake(s.id);
  await until('the app listens', () => accepts(appPort), 60_000); // a node child process: seconds on a loaded host, over 20 s in CI's fast tier while other files initdb their PostgreSQL
  const first = await get(edge.http, host(s), '/one');
  held();
  assert.is(first.status, 200);
  const pid = JSON.parse(first.text).pid;
  const starts = rt.starts;
  for (let round = 0; round < 2; round++) {
    r.cutAll(); // the app closed its kept-alive connections (as apps do after a few seconds)
    const before = r.count();
    await until('doze', () => tracker.isDozing(s.id), 3000);
    assert.is(edge.proxy.state(s.id), 'sleeping');
    await until('a spare connection is made while it dozes', () => r.count() - before === 1);
    const res = await get(edge.http, host(s), `/after-doze-${round}`);
    assert.is(res.status, 200);
    assert.is(JSON.parse(res.text).pid, pid, 'the same process answers (thawed, not started)');
    assert.is(JSON.parse(res.text).url, `/after-doze-${round}`);
    assert.is(r.count() - before, 1, 'one connection: the request went over the spare made while it dozed (no probe, no other)');
    assert.is(rt.starts, starts, 'no start');
    assert.is(edge.proxy.state(s.id), 'running');
  }
});

/** A server behind a relay that counts its app's connections, started and answered once (held
 *  awake meanwhile, as the first test says why), its kept-alive connections then cut: it dozes next. */
async function answeredOnce(slug: string): Promise<{ s: Site; r: Awaited<ReturnType<typeof relay>> }> {
  const appPort = await freePort();
  const r = await relay(appPort);
  const s = addServer(slug, appPort, { upstreamPort: r.port });
  const held = tracker.hold(s.id);
  await tracker.wake(s.id);
  await until('the app listens', () => accepts(appPort), 60_000);
  assert.is((await get(edge.http, host(s), '/one')).status, 200);
  held();
  r.cutAll();
  return { s, r };
}

test('a dozing server thawed for anything but a request (an SSH login, a port connection) has its spare connection closed', async () => {
  const { s, r } = await answeredOnce('sparedrop');
  await until('doze', () => tracker.isDozing(s.id), 3000);
  await until('the spare connection, open while it dozes', () => r.live() === 1);
  tracker.touch(s.id); // what an SSH login or an exposed port's connection does
  await until('the spare is closed once it thawed', () => r.live() === 0);
  assert.ok(!tracker.isDozing(s.id));
  assert.is((await get(edge.http, host(s), '/after')).status, 200);
});

test('a thaw that fails answers the request at once with the wake page; the next request thaws the server and is answered', async () => {
  const { s } = await answeredOnce('thawfails');
  await until('doze', () => tracker.isDozing(s.id), 3000);
  const thaw = rt.thaw.bind(rt);
  rt.thaw = async () => {
    rt.thaw = thaw; // once
    throw new Error('EIO: the cgroup could not be written');
  };
  const t0 = performance.now();
  const failed = await get(edge.http, host(s), '/while-failing');
  const ms = performance.now() - t0;
  assert.is(failed.status, 503, failed.text);
  assert.match(failed.text, 'wake_failed');
  assert.ok(ms < 2000, `answered in ${ms.toFixed(0)} ms, not left to the upstream's timeout`);
  assert.ok(tracker.isDozing(s.id), 'still frozen');
  const ok = await get(edge.http, host(s), '/after');
  assert.is(ok.status, 200);
  assert.is(JSON.parse(ok.text).url, '/after');
});

test('a thaw queued behind other work for the server is waited for: the request reaches the app only once it is thawed', async () => {
  const { s, r } = await answeredOnce('thawqueued');
  await until('doze', () => tracker.isDozing(s.id), 3000);
  const thaw = rt.thaw.bind(rt);
  const before = r.sent();
  let reachedFrozen: number | undefined;
  (rt as { thawsAtOnce?: (id: string) => boolean }).thawsAtOnce = () => false; // a checkpoint's copy, say, is queued for it
  rt.thaw = async (id: string) => {
    // the queued work: a few turns of the event loop, in which a request sent at once would have
    // reached the relay (written in the thaw's call, flushed in that turn, read in the next)
    for (let i = 0; i < 3; i++) await new Promise((res) => setImmediate(res));
    reachedFrozen = r.sent() - before;
    return thaw(id);
  };
  try {
    const res = await get(edge.http, host(s), '/queued');
    assert.is(res.status, 200, res.text);
    assert.is(reachedFrozen, 0, 'no byte of the request reached the app while it was frozen');
  } finally {
    rt.thaw = thaw;
    delete (rt as { thawsAtOnce?: unknown }).thawsAtOnce;
  }
});

test('an app that died while its server dozed: the thaw finds its port closed, the request waits for the app to listen again', async () => {
  const appPort = await freePort();
  const s = addServer('died', appPort);
  const first = await get(edge.http, host(s), '/one');
  assert.is(first.status, 200);
  const starts = rt.starts;
  await until('doze', () => tracker.isDozing(s.id), 3000);
  // killed while frozen (e.g. by the OOM killer); the server's supervisor starts it again a moment later
  const child = rt.servers.get(s.id)!.child!;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  let again: Server | undefined;
  const restart = sleep(300).then(
    () =>
      new Promise<void>((r) => {
        again = httpServer((req, res) => res.end(JSON.stringify({ restarted: true, url: req.url })));
        again.listen(appPort, '127.0.0.1', r);
      }),
  );
  closers.push(() => again?.close());
  const res = await get(edge.http, host(s), '/after-death');
  await restart;
  assert.is(res.status, 200, `answered once the app listened again (got ${res.status} ${res.text.slice(0, 120)})`);
  assert.equal(JSON.parse(res.text), { restarted: true, url: '/after-death' });
  assert.is(rt.starts, starts, 'a thaw, not a start');
  again?.closeAllConnections();
});

test('a dozing server whose run.sh look is stale is thawed while the look is made, and answered once it found run.sh', async () => {
  // an edge of its own whose run.sh look is stale after 50 ms (the doze comes after 300 ms idle)
  const quick = await startEdge({ sites, runtime: rt, presence: tracker, cfg: testConfig({ wakeTimeout: '5s', publishCheckInterval: '50ms' }) });
  // the look's lstat waits in libuv's thread pool, kept busy by opens of fifos with no writer yet
  const fifos = Array.from({ length: Number(process.env.UV_THREADPOOL_SIZE ?? 4) }, (_, i) => join(top, `fifo${i}`));
  const blocked: Promise<unknown>[] = [];
  try {
    const s = addServer('stale', await freePort());
    const first = await get(quick.http, host(s), '/one');
    assert.is(first.status, 200);
    await until('doze', () => tracker.isDozing(s.id), 3000);
    for (const f of fifos) execFileSync('mkfifo', [f]);
    for (const f of fifos) blocked.push(open(f, 'r').then((h) => h.close()));
    const thaws = tracker.thaws;
    const starts = rt.starts;
    const res = get(quick.http, host(s), '/after-doze');
    await until('thawed while the look waits', () => tracker.thaws > thaws, 1000); // before its doze timeout (1.5 s) stops it
    assert.is(rt.starts, starts, 'a thaw, not a start');
    for (const f of fifos) closeSync(openSync(f, constants.O_WRONLY | constants.O_NONBLOCK)); // the pool's threads go free
    await Promise.all(blocked);
    const r = await res;
    assert.is(r.status, 200);
    assert.is(JSON.parse(r.text).url, '/after-doze');
  } finally {
    for (const f of fifos)
      if (blocked.length)
        try {
          closeSync(openSync(f, constants.O_WRONLY | constants.O_NONBLOCK));
        } catch {
          /* freed */
        }
    await quick.stop();
  }
});

test('a look made during a doze holds while it lasts: a stale cache costs the thawed request no new look', async () => {
  // an edge of its own whose ordinary run.sh look is stale after 50 ms (the doze comes after 300 ms idle)
  const quick = await startEdge({ sites, runtime: rt, presence: tracker, cfg: testConfig({ wakeTimeout: '5s', publishCheckInterval: '50ms' }) });
  const fifos = Array.from({ length: Number(process.env.UV_THREADPOOL_SIZE ?? 4) }, (_, i) => join(top, `pinfifo${i}`));
  const blocked: Promise<unknown>[] = [];
  const free = () => {
    for (const f of fifos.slice(0, blocked.length))
      try {
        closeSync(openSync(f, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        /* freed */
      }
  };
  try {
    const s = addServer('pinned', await freePort());
    assert.is((await get(quick.http, host(s), '/one')).status, 200);
    await until('doze', () => tracker.isDozing(s.id), 3000);
    await until('the look made once it froze (two lstats)', () => quick.proxy.lookedAtDoze(s.id), 2000);
    // from now on a look would wait: libuv's thread pool is kept busy by opens of fifos with no writer yet
    for (const f of fifos) execFileSync('mkfifo', [f]);
    for (const f of fifos) blocked.push(open(f, 'r').then((h) => h.close()));
    const thaws = tracker.thaws;
    const r = await Promise.race([get(quick.http, host(s), '/after-doze'), sleep(2000).then(() => undefined)]);
    assert.ok(r, 'answered while no look can complete (before: the request waited for a new look)');
    assert.is(r.status, 200);
    assert.is(JSON.parse(r.text).url, '/after-doze');
    assert.is(tracker.thaws, thaws + 1);
  } finally {
    free();
    await Promise.all(blocked);
    await quick.stop();
  }
});

test('a server whose run.sh went away before it dozed is served its files without a thaw', async () => {
  const quick = await startEdge({ sites, runtime: rt, presence: tracker, cfg: testConfig({ wakeTimeout: '5s', publishCheckInterval: '50ms' }) });
  try {
    const s = addServer('unpublished', await freePort());
    mkdirSync(join(s.rootfs, 'root/www'), { recursive: true });
    writeFileSync(join(s.rootfs, 'root/www/index.html'), 'static page');
    assert.is((await get(quick.http, host(s), '/one')).status, 200);
    rmSync(join(s.rootfs, 'root/run.sh')); // removed from the host side while it runs, before its doze
    await until('doze', () => tracker.isDozing(s.id), 3000);
    await until('the look made once it froze', () => quick.proxy.lookedAtDoze(s.id), 2000);
    const thaws = tracker.thaws;
    const r = await get(quick.http, host(s), '/');
    assert.is(r.status, 200);
    assert.is(r.text, 'static page');
    assert.is(tracker.thaws, thaws, 'no thaw (before: thawed while its stale look was made)');
    assert.ok(tracker.isDozing(s.id));
  } finally {
    await quick.stop();
  }
});

test('a server whose run.sh appeared during its doze (from the host side) gets its app: a look that found none is looked at again', async () => {
  const quick = await startEdge({ sites, runtime: rt, presence: tracker, cfg: testConfig({ wakeTimeout: '5s', publishCheckInterval: '50ms' }) });
  try {
    const s = addServer('appeared', await freePort());
    mkdirSync(join(s.rootfs, 'root/www'), { recursive: true });
    writeFileSync(join(s.rootfs, 'root/www/index.html'), 'static page');
    const runSh = readFileSync(join(s.rootfs, 'root/run.sh'));
    assert.is((await get(quick.http, host(s), '/one')).status, 200);
    rmSync(join(s.rootfs, 'root/run.sh'));
    await until('doze', () => tracker.isDozing(s.id), 3000);
    await until('the look made once it froze (none there)', () => quick.proxy.lookedAtDoze(s.id), 2000);
    assert.is((await get(quick.http, host(s), '/')).text, 'static page');
    assert.ok(tracker.isDozing(s.id), 'its files, no thaw');
    writeFileSync(join(s.rootfs, 'root/run.sh'), runSh);
    chmodSync(join(s.rootfs, 'root/run.sh'), 0o755);
    await sleep(60); // past the ordinary look's cache (50 ms)
    const r = await get(quick.http, host(s), '/after-doze');
    assert.is(r.status, 200);
    assert.is(JSON.parse(r.text).url, '/after-doze', `its app answers (got ${r.text.slice(0, 80)})`);
    assert.ok(!tracker.isDozing(s.id));
  } finally {
    await quick.stop();
  }
});

test('a TLS ClientHello naming a dozing server thaws it while the handshake goes on; the request after it finds it awake', async () => {
  const s = addServer('hello', await freePort());
  assert.is((await get(edge.http, host(s), '/one')).status, 200);
  await until('doze', () => tracker.isDozing(s.id), 3000);
  const thaws = tracker.thaws;
  // a handshake that never ends: the hello alone (its SNI) is what thaws the server
  const raw = connect({ host: '127.0.0.1', port: edge.https });
  const hello = tlsConnect({ socket: raw, servername: host(s), rejectUnauthorized: false });
  hello.on('error', () => {});
  try {
    await until('thawed at the hello', () => tracker.thaws > thaws, 2000);
    assert.ok(!tracker.isDozing(s.id));
    assert.is(edge.proxy.state(s.id), 'running');
  } finally {
    hello.destroy();
  }
  // a hello naming no server, or an unknown one, thaws nothing
  await until('doze again', () => tracker.isDozing(s.id), 3000);
  for (const name of [`nosuch.${DOMAIN}`, 'example.org']) {
    const t = tlsConnect({ host: '127.0.0.1', port: edge.https, servername: name, rejectUnauthorized: false });
    t.on('error', () => {});
    await new Promise((r) => t.once('secureConnect', r).once('error', r).once('close', r));
    t.destroy();
  }
  assert.ok(tracker.isDozing(s.id));
});

test("a TLS hello's thaw keeps the spare connection for the request after the handshake, which goes over it", async () => {
  const { s, r } = await answeredOnce('hellospare');
  const before = r.count();
  await until('doze', () => tracker.isDozing(s.id), 3000);
  await until('the spare connection, open while it dozes', () => r.live() === 1);
  const t = tlsConnect({ host: '127.0.0.1', port: edge.https, servername: host(s), rejectUnauthorized: false });
  t.on('error', () => {});
  const answer = await new Promise<string>((resolve) => {
    let got = '';
    t.once('secureConnect', () => t.write(`GET /over-tls HTTP/1.1\r\nHost: ${host(s)}\r\nConnection: close\r\n\r\n`));
    t.on('data', (d: Buffer) => (got += d.toString('latin1')));
    t.once('close', () => resolve(got));
  });
  assert.match(answer, /^HTTP\/1\.1 200 /);
  assert.match(answer, '/over-tls');
  assert.is(r.count() - before, 1, 'the request went over the spare made while it dozed');
});

test('a server stopped after its doze timeout is started again and its app probed until it listens', async () => {
  const s = addServer('stopped', await freePort(), { bindDelay: 250 });
  const first = await get(edge.http, host(s), '/one');
  assert.is(first.status, 200);
  const pid = JSON.parse(first.text).pid;
  await until('doze', () => tracker.isDozing(s.id), 3000);
  await until('stop after the doze timeout', () => rt.get(s.id)?.state === 'sleeping', DOZE + 3000);
  const starts = rt.starts;
  const res = await get(edge.http, host(s), '/after-stop');
  assert.is(res.status, 200, `answered once the started app listened (got ${res.status})`);
  assert.is.not(JSON.parse(res.text).pid, pid, 'a freshly started app');
  assert.is(rt.starts, starts + 1);
});

test.run();
