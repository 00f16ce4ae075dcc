// The channel's raw lane (src/channel/rawlane.ts, rawpool.ts, rawowner.ts, muxwire.ts): host B's
// edge sends bodiless GETs/HEADs for a server of host A as streams multiplexed over one
// mutual-TLS connection into A's proxy lane. Real pieces on loopback: B's Edge with the channel's front and peers, A's
// channel server with its real proxy, an app (node:http) on its own port, and a TCP relay between
// B and A's channel listener that counts, and can cut, the connections B opens.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { createServer as createNetServer, connect as netConnect, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RetryBudget } from '../../src/channel/sender-body.js';
import { ClusterFront } from '../../src/channel/sender-front.js';
import { issueIdentity } from '../../src/channel/identity.js';
import type { Placements } from '../../src/channel/lookup.js';
import { Peers } from '../../src/channel/sender-peers.js';
import { RawPool } from '../../src/channel/sender-rawpool.js';
import { CANCEL, DATA, END, FrameReader, HEAD, header, MUX_ALPN } from '../../src/channel/wire-mux.js';
import { ChannelServer } from '../../src/channel/owner-server.js';
import { createCa, Edge, issueLeaf, loadCa, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy, type Site } from '../../src/proxy/index.js';
import type { CaPair } from '../../src/registry/index.js';
import { runningRuntime, sitesOf, testConfig } from '../proxy/helpers.js';
import { until } from '../helpers/wait.js';
import { ManualClock } from '../helpers/clock.js';

const DOMAIN = 'rbx.test';
const top = mkdtempSync(join(tmpdir(), 'rbx-rawlane-'));
const log = createLogger({ level: 'error' });
const name = 'rootbox cluster CA';
const pair: CaPair = { name, ...createCa(name) };
const stops: (() => unknown)[] = [];
let edgePort = 0;
let channelPort = 0;
/** Connections B opened to A's channel (through the relay), in order. */
const relayed: { client: Socket; upstream: Socket; down: number }[] = [];
/** What the app was sent, per request. */
const seen: Record<string, string | string[] | undefined>[] = [];
let appPort = 0;
/** Egress A's proxy counted, by server. */
const egress: Record<string, number> = {};
/** Ends the slow answers under way. */
const release: (() => void)[] = [];
/** Where B reaches A's channel (the relay). */
let relayAddress = '';
/** The slugs A's channel looked up (one per request it was sent). */
const askedA: string[] = [];
/** Answers the app stopped writing because their connection closed, by path. */
const closedEarly: string[] = [];
/** Bytes the app handed to its connection for the big answer under way. */
let bigWritten = 0;
/** B's peers (a test may take the raw pool away: lane requests then go over the HTTP/2 session). */
let peersB: Peers;
/** A's channel server's clock (its raw connections' idle timers). */
const clockA = new ManualClock();
/** B's certificate, for a pool of the test's own. */
let identityB: ReturnType<typeof issueIdentity>;

/** The byte at offset i of a big answer (a pattern, so a byte out of place shows). */
function patterned(from: number, n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (from + i) % 251;
  return b;
}

/** `n` bytes in 64 KiB writes, each after the last one drained: back-pressure reaches the app. */
function bigAnswer(res: import('node:http').ServerResponse, n: number): void {
  bigWritten = 0;
  res.writeHead(200, { 'content-length': String(n) });
  const next = () => {
    while (bigWritten < n) {
      const k = Math.min(65536, n - bigWritten);
      const ok = res.write(patterned(bigWritten, k));
      bigWritten += k;
      if (!ok) return void res.once('drain', next);
    }
    res.end();
  };
  next();
}

test.before(async () => {
  const rootfs = join(top, 'rootfs');
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  const app: Server = createServer((req, res) => {
    seen.push(req.headers);
    res.on('close', () => (res.writableFinished ? undefined : closedEarly.push(req.url ?? '')));
    const big = /^\/big\/(\d+)$/.exec(req.url ?? '');
    if (big) return bigAnswer(res, Number(big[1]));
    const slow = /^\/slow\/(\d+)$/.exec(req.url ?? '');
    if (!slow) return void res.end(`hello ${req.url}`);
    // a first part at once, the rest when the test says (or the connection goes)
    res.writeHead(200, { 'content-length': String(2 * Number(slow[1])) });
    res.write('a'.repeat(Number(slow[1])));
    release.push(() => res.end('b'.repeat(Number(slow[1]))));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  appPort = (app.address() as AddressInfo).port;
  stops.push(() => (app.closeAllConnections(), app.close()));

  // host A: its proxy serves srv_raw (an app) behind its channel server
  const site: Site = { id: 'srv_raw', slug: 'raw', rootfs, upstream: { host: '127.0.0.1', port: appPort }, neverSleep: true, suspended: false };
  // srv_down: an app whose port 80 nobody listens on (its lane request fails after appStartGrace)
  const closed = createNetServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const closedPort = (closed.address() as AddressInfo).port;
  await new Promise((r) => closed.close(r));
  const down: Site = { id: 'srv_down', slug: 'down', rootfs, upstream: { host: '127.0.0.1', port: closedPort }, neverSleep: true, suspended: false };
  const sites = sitesOf([site, down]);
  const proxy = createProxy({
    log,
    sites,
    runtime: runningRuntime(sites),
    cfg: testConfig({ appStartGrace: '300ms' }),
    egress: (id, n) => (egress[id] = (egress[id] ?? 0) + n),
  });
  const identityA = issueIdentity(pair, 'host-a');
  const server = new ChannelServer({
    identity: () => identityA,
    local: proxy,
    servers: {
      bySlug: (slug) => (slug === 'raw' || slug === 'down' ? (askedA.push(slug), { id: `srv_${slug}` }) : undefined),
      get: (id) => (id === 'srv_raw' || id === 'srv_down' ? { id } : undefined),
    },
    placements: { byServer: () => undefined },
    log,
    clock: clockA,
  });
  channelPort = await server.listen('127.0.0.1:0');
  stops.push(
    () => server.close(),
    () => proxy.stop(),
  );

  // the relay B reaches A through
  const relay: NetServer = createNetServer((client) => {
    const upstream = netConnect(channelPort, '127.0.0.1');
    const entry = { client, upstream, down: 0 };
    relayed.push(entry);
    upstream.on('data', (d: Buffer) => (entry.down += d.length));
    client.pipe(upstream).pipe(client);
    const cut = () => (client.destroy(), upstream.destroy());
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const relayPort = (relay.address() as AddressInfo).port;
  relayAddress = `127.0.0.1:${relayPort}`;
  stops.push(() => {
    for (const e of relayed) e.client.destroy();
    relay.close();
  });

  // host B: an edge whose proxy runs nothing; the front forwards raw.rbx.test to host-a
  identityB = issueIdentity(pair, 'host-b');
  const placed = {
    raw: { serverId: 'srv_raw', slug: 'raw', host: 'host-a', epoch: 1 },
    down: { serverId: 'srv_down', slug: 'down', host: 'host-a', epoch: 1 },
  };
  const at = (slug: string) => (slug === 'raw' || slug === 'down' ? placed[slug] : undefined);
  const placements: Placements = {
    bySlug: at,
    byServer: (id) => Object.values(placed).find((p) => p.serverId === id),
    fresh: async (slug) => at(slug),
    host: (n) => (n === 'host-a' ? { name: n, advertise: `127.0.0.1:${relayPort}`, up: true } : undefined),
  };
  const peers = (peersB = new Peers({ identity: () => identityB, connectTimeoutMs: 2000, log }));
  const local = createProxy({ log, cfg: testConfig(), sites: { lookup: () => undefined, neverSleep: () => false } });
  const front = new ClusterFront({
    local,
    servers: { bySlug: () => undefined },
    placements,
    peers,
    self: 'host-b',
    retry: { cap: 1 << 20, budget: new RetryBudget(8 << 20, 64 << 20) },
    log,
  });
  const nope: HttpApp = { handle: async (_q, r) => void r.writeHead(404).end() };
  const tls = new TlsManager({ domain: DOMAIN, dataDir: join(top, 'b'), log });
  const edge = new Edge({
    domain: DOMAIN,
    http: { host: '127.0.0.1', port: 0, redirect: false },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: nope, verify: nope, proxy: front },
  });
  await edge.start();
  edgePort = edge.ports.http;
  stops.push(
    () => edge.stop(200),
    () => peers.close(),
    () => local.stop(),
    () => tls.close(),
  );
});

test.after(async () => {
  for (const s of stops.reverse()) await s();
  rmSync(top, { recursive: true, force: true });
});

/** One GET through B's edge on a connection of its own: status, body, and whether it was cut. */
function get(path: string, o: { onFirst?: (sock: Socket) => void } = {}): Promise<{ status: number; body: string; cut: boolean; read: number }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port: edgePort, path, agent: false, headers: { host: `raw.${DOMAIN}` } }, (res) => {
      let body = '';
      let first = true;
      res.setEncoding('latin1');
      res.on('data', (d: string) => {
        body += d;
        if (first) o.onFirst?.(req.socket as Socket);
        first = false;
      });
      const read = () => (req.socket as Socket).bytesRead;
      res.on('end', () => resolve({ status: res.statusCode!, body, cut: false, read: read() }));
      res.on('error', () => resolve({ status: res.statusCode!, body, cut: true, read: read() }));
      res.on('aborted', () => resolve({ status: res.statusCode!, body, cut: true, read: read() }));
    });
    req.on('error', () => resolve({ status: 0, body: '', cut: true, read: 0 }));
    req.end();
  });
}

test('lane requests through B share one multiplexed connection to A, beside the HTTP/2 session', async () => {
  // the first opens the HTTP/2 session (the full path); the raw lane needs it open
  assert.is((await get('/warm')).status, 200);
  await until('the first answer is counted', () => egress.srv_raw > 0, 5000);
  const before = relayed.length;
  const counted = egress.srv_raw;
  let read = 0;
  for (let i = 0; i < 5; i++) {
    const r = await get(`/seq/${i}`);
    assert.is(r.status, 200);
    assert.is(r.body, `hello /seq/${i}`);
    read += r.read;
  }
  // many at once: each its own answer, on the same connection
  const many = await Promise.all(Array.from({ length: 40 }, (_, i) => get(`/many/${i}`)));
  many.forEach((r, i) => assert.is(r.body, `hello /many/${i}`));
  read += many.reduce((n, r) => n + r.read, 0);
  assert.is(relayed.length - before, 1, 'one raw connection carried the 45 requests');
  // egress is counted once, on A, from what it wrote on the channel: the answers as the clients read
  // them, but for the `connection: close` B adds for its own clients (they asked to close)
  const wrote = read - 45 * 'connection: close\r\n'.length;
  await until('A counts the answers', () => egress.srv_raw - counted >= wrote, 5000);
  assert.is(egress.srv_raw - counted, wrote);
  // the client's address as B saw it reached the app; the channel's own fields did not
  const last = seen[seen.length - 1];
  assert.is(last['x-forwarded-for'], '127.0.0.1');
  assert.is(Object.keys(last).filter((k) => k.startsWith('x-rootbox-')).length, 0, JSON.stringify(last));
});

test('a channel connection cut mid-answer cuts the answers under way on it; the next request opens a new one', async () => {
  await get('/warm2');
  const n = 200_000;
  const firsts: number[] = [];
  const answers = [get(`/slow/${n}`, { onFirst: () => firsts.push(1) }), get(`/slow/${n}`, { onFirst: () => firsts.push(1) })];
  await until('both answers began', () => firsts.length === 2 && release.length === 2, 10_000);
  const raw = relayed.filter((e) => e.down > 2 * n && !e.client.destroyed); // the one carrying both
  assert.is(raw.length, 1, `connections carrying the answers: ${raw.length}`);
  raw[0].upstream.destroy();
  const got = await Promise.all(answers);
  for (const go of release.splice(0)) go();
  assert.is(got.filter((g) => g.cut).length, 2, 'both clients see a truncated answer');
  const count = relayed.length;
  const next = await get('/after-cut');
  assert.is(next.body, 'hello /after-cut');
  assert.is(relayed.length, count + 1, 'a new connection');
});

test('a client that leaves mid-answer ends only its own stream: A stops that answer, the others on the connection go on', async () => {
  await get('/warm3');
  const n = 100_000;
  const count = relayed.length;
  const left = get(`/slow/${n}`, { onFirst: (s) => s.destroy() });
  const r = await left;
  assert.ok(r.cut);
  await until('the app was asked', () => release.length === 1, 5000);
  const next = await get('/mine');
  assert.is(next.status, 200);
  assert.is(next.body, 'hello /mine');
  await until("A closed the app's connection of the answer nobody reads", () => closedEarly.includes(`/slow/${n}`), 5000);
  release.splice(0);
  assert.is(relayed.length, count, 'the same connection carried on');
});

test('a stream a client left is over on B at once: many clients leaving mid-answer leave no stream behind on the connection', async () => {
  await get('/warm7');
  const pool = peersB.raw('host-a', relayAddress) as unknown as { conn?: { streams: Map<number, unknown> } };
  const before = closedEarly.length;
  for (let i = 0; i < 20; i++) {
    const r = await get(`/slow/${100_000}`, { onFirst: (s) => s.destroy() });
    assert.ok(r.cut);
  }
  await until('A stopped every answer', () => closedEarly.length - before >= 20, 5000);
  release.splice(0);
  assert.is(pool.conn?.streams.size, 0, 'streams left on the connection');
  assert.is((await get('/after-left')).body, 'hello /after-left');
});

test("a slow client's large answer runs at most a window ahead of it: the app waits, and answers beside it do not", async () => {
  await get('/warm4');
  const n = 48 * 1024 * 1024;
  const count = relayed.length;
  let reader: import('node:http').IncomingMessage | undefined;
  const chunks: Buffer[] = [];
  const done = new Promise<{ status: number; body: Buffer }>((resolve) => {
    const req = request({ host: '127.0.0.1', port: edgePort, path: `/big/${n}`, agent: false, headers: { host: `raw.${DOMAIN}` } }, (res) => {
      reader = res;
      res.on('data', (d: Buffer) => chunks.push(d));
      res.pause(); // the client reads nothing more for now
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }));
    });
    req.end();
  });
  await until('the answer began', () => reader !== undefined && bigWritten > 0, 5000);
  // the app stops once the buffers on the way and the stream's window are full
  let last = -1;
  await until(
    'the app is held',
    async () => {
      const now = bigWritten;
      const still = now === last;
      last = now;
      if (!still) await new Promise((r) => setTimeout(r, 50));
      return still;
    },
    10_000,
  );
  assert.ok(bigWritten < n / 2, `the app wrote ${bigWritten} of ${n} bytes for a client that reads nothing`);
  const beside = await get('/beside');
  assert.is(beside.body, 'hello /beside', 'an answer on the same connection is not held behind it');
  reader!.resume();
  const got = await done;
  assert.is(got.status, 200);
  assert.is(got.body.length, n);
  assert.ok(got.body.equals(patterned(0, n)), 'byte-exact');
  assert.is(relayed.length, count, 'one connection');
});

test('pipelined lane requests through B over the HTTP/2 session (no raw pool) are answered once each, in order: one behind a slow answer waits for it', async () => {
  await get('/warm'); // the session to A is open
  const raw = peersB.raw.bind(peersB);
  peersB.raw = () => undefined;
  const sock = netConnect(edgePort, '127.0.0.1');
  try {
    const paths = ['/p1', '/slow/1000', '/p3'];
    sock.write(paths.map((x) => `GET ${x} HTTP/1.1\r\nhost: raw.${DOMAIN}\r\n\r\n`).join(''));
    let got = '';
    sock.setEncoding('latin1');
    sock.on('data', (d: string) => (got += d));
    await until('the slow answer begun', () => got.includes('a'.repeat(1000)) && release.length > 0, 5000);
    await new Promise((r) => setTimeout(r, 50)); // a request started beside the slow one would be answered by now
    assert.not.ok(got.includes('hello /p3'), 'the third request waits for the second answer to end');
    for (const end of release.splice(0)) end();
    await until('the third answer', () => got.includes('hello /p3'), 5000);
    const at = ['hello /p1', 'b'.repeat(1000), 'hello /p3'].map((w) => got.indexOf(w));
    assert.ok(at[0] >= 0 && at[0] < at[1] && at[1] < at[2], `in order: ${at.join(', ')}`);
    assert.is([...got.matchAll(/HTTP\/1\.1 200/g)].length, 3, 'one answer each');
  } finally {
    sock.destroy();
    peersB.raw = raw;
  }
});

test("a failure on A's lane comes back with its stream: B answers it with A's error, without sending the request again", async () => {
  await get('/warm5');
  const count = relayed.length;
  const n = askedA.filter((x) => x === 'down').length;
  const got = await new Promise<{ status: number; body: string }>((resolve) => {
    const req = request(
      { host: '127.0.0.1', port: edgePort, path: '/x', agent: false, headers: { host: `down.${DOMAIN}`, accept: 'application/json' } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      },
    );
    req.end();
  });
  assert.is(got.status, 502, got.body);
  const err = JSON.parse(got.body) as { error: string; detail: string; hint?: string };
  assert.is(err.error, 'app_down');
  assert.match(JSON.stringify(err), /run\.sh/, 'the failure keeps its hint');
  assert.is(askedA.filter((x) => x === 'down').length - n, 1, 'A was asked once: the failure was not forwarded again');
  assert.is(relayed.length, count, 'on the raw lane');
});

test('fields every Connection header of a lane request names stay on B, on the raw lane and over the HTTP/2 session: hop-by-hop, whichever header names them', async () => {
  await get('/warm6');
  const count = relayed.length;
  const raw = peersB.raw.bind(peersB);
  for (const lane of ['raw', 'session']) {
    if (lane === 'session') peersB.raw = () => undefined;
    const sock = netConnect(edgePort, '127.0.0.1');
    try {
      sock.write(
        `GET /named HTTP/1.1\r\nhost: raw.${DOMAIN}\r\nconnection: x-first\r\nconnection: x-second, close\r\nx-first: 1\r\nx-second: 2\r\nx-kept: 3\r\n\r\n`,
      );
      let got = '';
      sock.setEncoding('latin1');
      sock.on('data', (d: string) => (got += d));
      await until('the answer', () => got.includes('hello /named'), 5000);
    } finally {
      sock.destroy();
      peersB.raw = raw;
    }
    const h = seen[seen.length - 1];
    assert.is(h['x-kept'], '3', lane);
    assert.is(h['x-first'], undefined, `${lane}: named by the first Connection header`);
    assert.is(h['x-second'], undefined, `${lane}: named by the second`);
  }
  assert.is(relayed.length, count, 'no new raw connection');
});

/** Sends `frames` to A's channel as a raw lane connection with `cert`; what A answered on stream 1, or why it refused. */
function speak(frames: Buffer[], cert?: { cert: string; key: string }): Promise<string> {
  return new Promise<string>((resolve) => {
    const s = tlsConnect({ host: '127.0.0.1', port: channelPort, ca: pair.certPem, servername: 'host-a', ALPNProtocols: [MUX_ALPN], ...cert }, () =>
      s.write(Buffer.concat(frames)),
    );
    let got = '';
    const reader = new FrameReader((type, id, payload) => {
      if (type === DATA && id === 1) got += payload.toString('latin1');
      if (type === END && id === 1) (resolve(got), s.destroy());
    });
    s.on('data', (d: Buffer) => reader.feed(d));
    s.on('error', (e: Error & { code?: string }) => resolve(`refused: ${e.code ?? e.message}`));
    s.on('close', () => resolve(got ? got : 'refused: closed'));
  });
}

const frame = (type: number, id: number, text = '') => Buffer.concat([header(type, id, Buffer.byteLength(text, 'latin1')), Buffer.from(text, 'latin1')]);
const who = (path: string) =>
  `GET ${path} HTTP/1.1\r\nhost: raw.${DOMAIN}\r\nx-rootbox-site: raw.${DOMAIN}\r\nx-rootbox-client-ip: 203.0.113.7\r\nx-rootbox-scheme: https\r\n` +
  `x-request-id: rid-raw-1\r\nx-rootbox-server: srv_raw\r\nx-rootbox-epoch: 1\r\nx-rootbox-hops: 1\r\n\r\n`;

test("A's raw listener hears only hosts of the cluster CA: a member's client address is trusted, a forged or missing certificate is refused", async () => {
  const member = issueIdentity(pair, 'host-x');
  const answer = await speak([frame(HEAD, 1, who('/who'))], { cert: member.cert, key: member.key });
  assert.match(answer, /^HTTP\/1\.1 200 /, answer);
  assert.ok(answer.endsWith('hello /who'), answer);
  assert.is(seen[seen.length - 1]['x-forwarded-for'], '203.0.113.7', 'a member vouches for its client');
  assert.is(seen[seen.length - 1]['x-request-id'], 'rid-raw-1');
  const asked = seen.length;
  assert.match(await speak([frame(HEAD, 1, who('/who'))]), /^refused/, 'no certificate');
  const self = createCa('host-x');
  assert.match(await speak([frame(HEAD, 1, who('/who'))], { cert: self.certPem, key: self.keyPem }), /^refused/, 'a self-signed certificate');
  const other = createCa(name);
  const forged = issueLeaf(loadCa(other.certPem, other.keyPem, name), ['host-b'], 1, true);
  assert.match(
    await speak([frame(HEAD, 1, who('/who'))], { cert: forged.certPem, key: forged.keyPem }),
    /^refused/,
    'a certificate of another CA with the same name',
  );
  assert.is(seen.length, asked, 'no refused request reached the app');
});

test('a peer that breaks the wire loses its connection, and only it: stream ids out of order, unknown frames, oversized heads', async () => {
  const member = issueIdentity(pair, 'host-x');
  const cert = { cert: member.cert, key: member.key };
  const asked = seen.length;
  // a head on an id already used (ids only grow), a frame type the wire has not, a head beyond its bound
  assert.is(await speak([frame(HEAD, 3, who('/one')), frame(HEAD, 1, who('/again'))], cert), 'refused: closed');
  assert.is(await speak([frame(9, 1, 'x')], cert), 'refused: closed');
  assert.is(await speak([header(HEAD, 1, 10 * 1024 * 1024)], cert), 'refused: closed');
  // a CANCEL for a stream never opened is no harm; the connection goes on
  const fine = await speak([frame(CANCEL, 7), frame(HEAD, 1, who('/fine'))], cert);
  assert.ok(fine.endsWith('hello /fine'), fine);
  assert.ok(seen.length - asked <= 2, 'at most the first head of the broken connection and the fine one reached the app');
  // B's lane is unharmed
  assert.is((await get('/still')).body, 'hello /still');
});

/** One GET of srv_raw on a stream of `pool`, answered in full (the head as B's raw lane writes it). */
function streamGet(pool: RawPool, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    const user = { onData: (b: Buffer) => void (got += b.toString('latin1')), onEnd: () => resolve(got) };
    const head =
      `GET ${path} HTTP/1.1\r\nhost: raw.${DOMAIN}\r\nx-rootbox-site: raw.${DOMAIN}\r\nx-rootbox-client-ip: 127.0.0.1\r\n` +
      `x-rootbox-scheme: http\r\nx-request-id: idle-${path}\r\nx-rootbox-server: srv_raw\r\nx-rootbox-epoch: 1\r\nx-rootbox-hops: 1\r\n\r\n`;
    const taken = pool.acquire(user, (s) => (s ? (s.head(head), s.consumed(0)) : reject(new Error('no stream'))));
    if (!taken) reject(new Error('the pool refused a stream'));
  });
}

test("B's raw connection stays open under a steady trickle of requests and closes once none began for its idle period", async () => {
  const clock = new ManualClock();
  const pool = new RawPool({ host: 'host-a', advertise: relayAddress, identity: () => identityB, max: 8, connectTimeoutMs: 2000, idleMs: 30_000, clock });
  try {
    const before = relayed.length;
    assert.match(await streamGet(pool, '/idle/0'), 'hello /idle/0');
    assert.is(relayed.length - before, 1);
    const conn = relayed[relayed.length - 1];
    // two minutes of one quick request every 10 s: never a sweep without a stream begun since the last
    for (let i = 1; i <= 12; i++) {
      clock.advance(10_000);
      assert.match(await streamGet(pool, `/idle/${i}`), `hello /idle/${i}`);
    }
    assert.not.ok(conn.client.destroyed, 'a connection that keeps carrying requests is kept');
    assert.is(relayed.length - before, 1, 'the trickle never needed a new connection');
    // then nothing: the sweeps (every 15 s) see the same stream id twice, 30 s apart
    clock.advance(20_000);
    assert.not.ok(conn.client.destroyed, 'not closed before its idle period');
    clock.advance(30_000);
    await until('the idle connection is closed', () => conn.client.destroyed, 5000);
  } finally {
    pool.close(true);
  }
});

test('A closes a raw connection idle for its idle period, but never one with an answer under way', async () => {
  const pool = new RawPool({ host: 'host-a', advertise: relayAddress, identity: () => identityB, max: 8, connectTimeoutMs: 2000, idleMs: 3_600_000 });
  try {
    const before = relayed.length;
    const slow = streamGet(pool, '/slow/1000');
    await until('the slow answer began', () => release.length > 0, 5000);
    assert.is(relayed.length - before, 1);
    const conn = relayed[relayed.length - 1];
    clockA.advance(5 * 60_000); // far past A's idle period, with the answer still under way
    await new Promise((r) => setTimeout(r, 50));
    assert.not.ok(conn.client.destroyed, 'a connection with an answer under way is kept');
    release.shift()!();
    assert.is((await slow).length > 2000, true, 'the slow answer arrived whole');
    clockA.advance(59_000);
    await new Promise((r) => setTimeout(r, 50));
    assert.not.ok(conn.client.destroyed, 'not closed before its idle period');
    clockA.advance(2_000);
    await until('A closed the idle connection', () => conn.client.destroyed, 5000);
  } finally {
    pool.close(true);
  }
});

test.run();
