// The edge against strangers who hold connections instead of using them: slowloris (heads that
// never complete, TLS handshakes that never start), one source address opening more than its
// share, and HTTP/2 rapid reset — against a real daemon with short limits
// (http.headerTimeout 2s, 50 connections per address, 50 stream resets).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect as h2connect, constants, type ClientHttp2Session } from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { exchange, hold } from '../edge/clients.js';
import { Edge, TlsManager } from '../../src/edge/index.js';
import { addressKey } from '../../src/edge/guard.js';
import { holderKey } from '../../src/slots.js';
import { Router } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';

const HEAD_DEADLINE = 2000;
const PER_ADDRESS = 50;
const RESETS = 50;
let d: TestDaemon;
test.before(async () => {
  d = await startTestDaemon({
    http: { host: '127.0.0.1', port: 0, headerTimeout: `${HEAD_DEADLINE}ms`, maxConnectionsPerAddress: PER_ADDRESS },
    https: { host: '127.0.0.1', port: 0, maxStreamResets: RESETS, streamResetWindow: '10s' },
  });
});
test.after(async () => d?.stop());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const curlFrom = (ip: string, extra: string[] = []) =>
  run('curl', [
    '-sS',
    '--max-time',
    '10',
    '--interface',
    ip,
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    '--resolve',
    `api.localhost:${d.http}:127.0.0.1`,
    ...extra,
    `http://api.localhost:${d.http}/healthz`,
  ]);
async function waitFor(cond: () => boolean, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) if (cond()) return true;
  return cond();
}

test('400 stalled connections from one address are closed within the head deadline while another address is served', async () => {
  const t0 = Date.now();
  // half send a request head that never ends (plain HTTP), half never start their TLS handshake
  const socks = await Promise.all(
    Array.from({ length: 400 }, (_, i) =>
      i % 2 ? hold(d.http, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nX-Slow: ', '127.0.0.2') : hold(d.https, '', '127.0.0.2'),
    ),
  );
  await sleep(200);
  assert.ok(d.daemon.edge.connections('127.0.0.2') <= PER_ADDRESS, `one address holds ${d.daemon.edge.connections('127.0.0.2')} connections`);
  const other = await curlFrom('127.0.0.3');
  assert.is(other.stdout, '200', `another address is served meanwhile: ${other.stderr}`);
  const allClosed = await waitFor(() => socks.every((s) => s.closedAt !== undefined), HEAD_DEADLINE + 4000);
  const open = socks.filter((s) => s.closedAt === undefined).length;
  for (const s of socks) s.destroy();
  assert.ok(allClosed, `${open} of 400 stalled connections still open ${Date.now() - t0} ms after they were opened`);
  const longest = Math.max(...socks.map((s) => s.closedAt! - t0));
  assert.ok(longest < HEAD_DEADLINE + 2500, `the last stalled connection lived ${longest} ms`);
  // plain ones: refused at once with a 429, or a 408 at the deadline; always {error, detail}
  const plain = socks.filter((_, i) => i % 2);
  const codes = new Set(plain.map((s) => JSON.parse(s.received.slice(s.received.indexOf('{'))).error));
  assert.equal([...codes].sort(), ['request_timeout', 'too_many_connections']);
  assert.ok(plain.some((s) => s.received.startsWith('HTTP/1.1 408 ')));
  assert.ok(plain.some((s) => s.received.startsWith('HTTP/1.1 429 ')));
  // the server sees the last clients' FIN (after its 408) a moment after they closed their side
  assert.ok(await waitFor(() => d.daemon.edge.connections('127.0.0.2') === 0, 1000), `${d.daemon.edge.connections('127.0.0.2')} still counted`);
});

test('one address gets at most its share of connections: the next one is refused at once with a 429, others are still admitted', async () => {
  const held = await Promise.all(Array.from({ length: PER_ADDRESS }, () => hold(d.http, '', '127.0.0.4')));
  try {
    assert.ok(
      await waitFor(() => d.daemon.edge.connections('127.0.0.4') === PER_ADDRESS, 2000),
      `the edge counts ${d.daemon.edge.connections('127.0.0.4')} connections`,
    );
    const refused = await exchange(d.http, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\n\r\n', { localAddress: '127.0.0.4', timeoutMs: 1500 });
    assert.ok(refused.closed, 'the connection over the cap is closed');
    assert.is(refused.status, 429);
    assert.is(refused.headers.connection, 'close');
    assert.match(refused.headers['content-type'], /application\/json/);
    const body = JSON.parse(refused.body);
    assert.is(body.error, 'too_many_connections');
    assert.match(body.detail, /50 open connections/);
    const tls = await exchange(d.https, '', { localAddress: '127.0.0.4', timeoutMs: 1500 });
    assert.ok(tls.closed && tls.closedAfter < 1000, 'over the cap, a TLS connection is closed at once');
    assert.is((await curlFrom('127.0.0.5')).stdout, '200');
    // a freed slot is usable again
    held.pop()!.destroy();
    assert.ok(await waitFor(() => d.daemon.edge.connections('127.0.0.4') < PER_ADDRESS, 1000));
    assert.is((await curlFrom('127.0.0.4')).stdout, '200');
  } finally {
    for (const s of held) s.destroy();
  }
});

test('connections that use their time are not cut by the head deadline: a slow upload over TLS, an HTTP/2 session, keep-alive between requests', async () => {
  // a request head at once, then its body over more than the deadline (HTTP/1.1 over TLS)
  const body = JSON.stringify({ message: 'slow but steady' });
  const answer = await new Promise<string>((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port: d.https, ca: d.ca, servername: 'api.localhost', ALPNProtocols: ['http/1.1'] });
    let got = '';
    s.on('data', (c) => (got += c));
    s.on('error', reject);
    s.on('close', () => resolve(got));
    s.once('secureConnect', async () => {
      s.write(
        `POST /feedback HTTP/1.1\r\nHost: api.localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
      );
      for (let i = 0; i < body.length; i += 6) {
        await sleep((HEAD_DEADLINE * 1.5) / (body.length / 6));
        s.write(body.slice(i, i + 6));
      }
    });
  });
  assert.match(answer, /^HTTP\/1\.1 200 /);
  // one HTTP/2 session used before and after the deadline
  const session = h2connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: 'api.localhost' });
  try {
    assert.is(await h2status(session, '/healthz'), 200);
    await sleep(HEAD_DEADLINE + 1000);
    assert.is(await h2status(session, '/healthz'), 200);
  } finally {
    session.close();
  }
  // keep-alive: the second request of a connection, sent well within the deadline after the first answer
  const twice = await exchange(
    d.http,
    'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\n\r\nGET /healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n',
  );
  assert.is(twice.text.match(/HTTP\/1\.1 200 /g)?.length, 2);
});

function h2status(session: ClientHttp2Session, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const r = session.request({ ':path': path, ':authority': 'api.localhost' });
    r.on('response', (h) => resolve(Number(h[':status'])));
    r.on('error', reject);
    r.resume();
  });
}

test('rapid reset: an HTTP/2 client that opens and cancels streams in a loop gets GOAWAY ENHANCE_YOUR_CALM after about maxStreamResets', async () => {
  const session = h2connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: 'api.localhost' });
  session.on('error', () => {});
  let goaway: { code: number; last: number } | undefined;
  session.on('goaway', (code, last) => (goaway = { code, last }));
  await new Promise((r) => session.once('connect', r));
  let sent = 0;
  const t0 = Date.now();
  // batches of 10 HEADERS + RST_STREAM, as fast as the client lets its event loop turn (~thousands/s)
  while (!goaway && !session.destroyed && sent < 3000) {
    for (let i = 0; i < 10; i++) {
      const r = session.request({ ':path': '/healthz', ':authority': 'api.localhost' });
      r.on('error', () => {});
      r.close(constants.NGHTTP2_CANCEL);
      sent++;
    }
    await sleep(1);
  }
  await waitFor(() => session.destroyed, 2000);
  session.destroy();
  assert.ok(goaway, `no GOAWAY after ${sent} cancelled streams in ${Date.now() - t0} ms`);
  assert.is(goaway!.code, constants.NGHTTP2_ENHANCE_YOUR_CALM);
  // stream ids are odd: last / 2 streams reached the server before it said stop
  assert.ok(goaway!.last / 2 < RESETS * 3, `the server processed ${Math.ceil(goaway!.last / 2)} streams before its GOAWAY`);
  assert.ok(d.logs.some((l) => l.msg === 'HTTP/2 session ended: too many stream resets'));
});

test('an HTTP/2 client that cancels a few streams keeps its connection', async () => {
  const session = h2connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: 'api.localhost' });
  try {
    for (let i = 0; i < RESETS / 2; i++) {
      const r = session.request({ ':path': '/healthz', ':authority': 'api.localhost' });
      r.on('error', () => {});
      r.close(constants.NGHTTP2_CANCEL);
      await sleep(2);
    }
    assert.is(await h2status(session, '/healthz'), 200);
  } finally {
    session.close();
  }
});

test('a source is an IPv4 address (also when IPv4-mapped) or an IPv6 /64, however the address is written', () => {
  assert.is(addressKey('203.0.113.9'), '203.0.113.9');
  assert.is(addressKey('::ffff:203.0.113.9'), '203.0.113.9');
  const net64 = addressKey('2001:db8:1:2::1');
  for (const ip of ['2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:0DB8:0001:0002:0:0:0:7', '2001:db8:1:2::']) assert.is(addressKey(ip), net64, ip);
  assert.is.not(addressKey('2001:db8:1:3::1'), net64);
  assert.is(addressKey('::1'), addressKey('0:0:0:0:0:0:0:1'));
});

test('fair shares count holders: an IPv4 address, or an IPv6 /56 (its /64s are one party)', () => {
  assert.is(holderKey('203.0.113.9'), '203.0.113.9');
  assert.is(holderKey('::ffff:203.0.113.9'), '203.0.113.9');
  const net56 = holderKey('2001:db8:1:200::1');
  for (const ip of ['2001:db8:1:2ff:ffff::1', '2001:0DB8:0001:0201:0:0:0:7', '2001:db8:1:200::']) assert.is(holderKey(ip), net56, ip);
  assert.is(net56, '2001:db8:1:200::/56');
  assert.is.not(holderKey('2001:db8:1:300::1'), net56);
  assert.is.not(addressKey('2001:db8:1:2ff::1'), addressKey('2001:db8:1:200::1'), 'per-source caps still count /64s');
});

test('over the total cap (http.maxConnections), connections from any address are refused; plain HTTP gets a 503', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rbx-edge-cap-'));
  const log = createLogger({ level: 'error', sink: () => {} });
  const tls = new TlsManager({ domain: 'localhost', dataDir: tmp, log });
  const app = new Router(log).on('GET', '/healthz', () => ({ status: 200, body: { ok: true } }));
  const edge = new Edge({
    domain: 'localhost',
    http: { host: '127.0.0.1', port: 0, redirect: false, maxConnections: 10 },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: app, verify: app, proxy: app },
  });
  await edge.start();
  const held = await Promise.all(Array.from({ length: 10 }, (_, i) => hold(edge.ports.http, '', `127.0.0.${10 + i}`)));
  try {
    assert.ok(await waitFor(() => edge.connections() === 10, 2000));
    const r = await exchange(edge.ports.http, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\n\r\n', { localAddress: '127.0.0.30', timeoutMs: 1500 });
    assert.is(r.status, 503);
    assert.is(JSON.parse(r.body).error, 'too_many_connections');
    held.pop()!.destroy();
    assert.ok(await waitFor(() => edge.connections() < 10, 1000));
    assert.is(
      (await exchange(edge.ports.http, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n', { localAddress: '127.0.0.30' })).status,
      200,
    );
  } finally {
    for (const s of held) s.destroy();
    await edge.stop(500);
    tls.close();
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('at the total cap a fresh address is still answered: the oldest idle connection of the address holding the most is closed for it, never one mid-request', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rbx-edge-fair-'));
  const log = createLogger({ level: 'error', sink: () => {} });
  const tls = new TlsManager({ domain: 'localhost', dataDir: tmp, log });
  let started = 0;
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const app = new Router(log)
    .on('GET', '/healthz', () => ({ status: 200, body: { ok: true } }))
    .on('GET', '/slow', async () => {
      started++;
      await gate;
      return { status: 200, body: { slow: true } };
    });
  const edge = new Edge({
    domain: 'localhost',
    http: { host: '127.0.0.1', port: 0, redirect: false, maxConnections: 10 },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: app, verify: app, proxy: app },
  });
  await edge.start();
  const port = edge.ports.http;
  const slow = 'GET /slow HTTP/1.1\r\nHost: api.localhost\r\n\r\n';
  const held: Awaited<ReturnType<typeof hold>>[] = [];
  try {
    // 127.0.0.40 holds the most (3), all mid-request; 127.0.0.41 holds 2 idle; five more addresses 1 idle each
    for (let i = 0; i < 3; i++) held.push(await hold(port, slow, '127.0.0.40'));
    assert.ok(await waitFor(() => started === 3, 2000), 'the three slow requests are under way');
    const idle41 = [await hold(port, '', '127.0.0.41')];
    assert.ok(await waitFor(() => edge.connections() === 4, 1000));
    idle41.push(await hold(port, '', '127.0.0.41'));
    const singles = await Promise.all([42, 43, 44, 45, 46].map((n) => hold(port, '', `127.0.0.${n}`)));
    held.push(...idle41, ...singles);
    assert.ok(await waitFor(() => edge.connections() === 10, 2000));

    const fresh = await exchange(port, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n', {
      localAddress: '127.0.0.50',
      timeoutMs: 3000,
    });
    assert.is(fresh.status, 200, fresh.text);
    assert.ok(await waitFor(() => idle41[0].closedAt !== undefined, 1000), "the oldest of 127.0.0.41's idle connections was closed for it");
    assert.is(idle41[1].closedAt, undefined);
    assert.ok(
      singles.every((s) => s.closedAt === undefined),
      'holders of one connection keep it',
    );
    assert.ok(
      held.slice(0, 3).every((s) => s.closedAt === undefined),
      'connections mid-request are never taken',
    );

    // now no holder with a connection to give holds two more than a fresh address: it is refused
    held.push(await hold(port, '', '127.0.0.47')); // the fresh one is gone: full again
    assert.ok(await waitFor(() => edge.connections() === 10, 2000), `${edge.connections()} open`);
    const next = await exchange(port, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\n\r\n', { localAddress: '127.0.0.51', timeoutMs: 1500 });
    assert.is(next.status, 503);
    assert.ok(held.slice(0, 3).every((s) => s.closedAt === undefined));
    open();
    assert.ok(await waitFor(() => held.slice(0, 3).every((s) => s.received.includes('"slow":true')), 2000), 'the slow requests are answered');
  } finally {
    open();
    for (const s of held) s.destroy();
    await edge.stop(500);
    tls.close();
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('at the total cap an HTTP/2 session with no stream open is closed for a newcomer; one with a stream open is not', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rbx-edge-h2-'));
  const log = createLogger({ level: 'error', sink: () => {} });
  const tls = new TlsManager({ domain: 'localhost', dataDir: tmp, log });
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const app = new Router(log)
    .on('GET', '/healthz', () => ({ status: 200, body: { ok: true } }))
    .on('GET', '/slow', async () => {
      await gate;
      return { status: 200, body: { slow: true } };
    });
  const edge = new Edge({
    domain: 'localhost',
    http: { host: '127.0.0.1', port: 0, redirect: false, maxConnections: 3 },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: app, verify: app, proxy: app },
  });
  await edge.start();
  const ca = readFileSync(tls.caFile!);
  const sessions: ClientHttp2Session[] = [];
  const session = () => {
    const s = h2connect(`https://127.0.0.1:${edge.ports.https}`, { ca, servername: 'api.localhost', localAddress: '127.0.0.60' } as never);
    s.on('error', () => {});
    sessions.push(s);
    return s;
  };
  const ask = (s: ClientHttp2Session, path: string) =>
    new Promise<string>((resolve, reject) => {
      const q = s.request({ ':path': path, ':authority': 'api.localhost' });
      let body = '';
      q.on('data', (c: Buffer) => (body += c));
      q.on('end', () => resolve(body));
      q.on('error', reject);
      q.end();
    });
  let held: Awaited<ReturnType<typeof hold>> | undefined;
  try {
    const busy = session();
    const slow = ask(busy, '/slow');
    assert.ok(await waitFor(() => edge.connections() === 1, 2000));
    const idle = session();
    assert.match(await ask(idle, '/healthz'), /"ok":true/);
    let idleClosed = false;
    idle.on('close', () => (idleClosed = true));
    held = await hold(edge.ports.http, '', '127.0.0.61');
    assert.ok(await waitFor(() => edge.connections() === 3, 2000));
    // 127.0.0.60 holds the most (2): its oldest session has a stream open, the other none
    const fresh = await exchange(edge.ports.http, 'GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n', {
      localAddress: '127.0.0.62',
      timeoutMs: 3000,
    });
    assert.is(fresh.status, 200, fresh.text);
    assert.ok(await waitFor(() => idleClosed, 2000), 'the idle HTTP/2 session was closed for it');
    assert.not.ok(busy.closed || busy.destroyed, 'the session with a stream open stays');
    open();
    assert.match(await slow, /"slow":true/);
  } finally {
    open();
    held?.destroy();
    for (const s of sessions) s.destroy();
    await edge.stop(500);
    tls.close();
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('300 idle connections from 30 addresses fill http.maxConnections (256); curl from another address is still answered', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'rbx-edge-fill-'));
  const log = createLogger({ level: 'error', sink: () => {} });
  const tls = new TlsManager({ domain: 'localhost', dataDir: tmp, log });
  const app = new Router(log).on('GET', '/healthz', () => ({ status: 200, body: { ok: true } }));
  const edge = new Edge({
    domain: 'localhost',
    http: { host: '127.0.0.1', port: 0, redirect: false, maxConnections: 256, maxConnectionsPerAddress: 10 },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: app, verify: app, proxy: app },
  });
  await edge.start();
  const port = edge.ports.http;
  const from = Array.from({ length: 30 }, (_, i) => `127.0.0.${101 + i}`);
  const held = (await Promise.all(from.map((ip) => Promise.all(Array.from({ length: 10 }, () => hold(port, '', ip)))))).flat();
  try {
    // (the edge accepts the last of them some time after the clients saw their connect)
    const shares = () => from.map((ip) => edge.connections(ip));
    const even = () => Math.max(...shares()) - Math.min(...shares()) <= 1;
    assert.ok(await waitFor(() => edge.connections() === 256 && even(), 5000), `the 256 slots are shared evenly: ${shares().join(' ')}`);
    const r = await run('curl', [
      '-sS',
      '--max-time',
      '10',
      '--interface',
      '127.0.1.1',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code} %{time_total}',
      '--resolve',
      `api.localhost:${port}:127.0.0.1`,
      `http://api.localhost:${port}/healthz`,
    ]);
    const [code, secs] = r.stdout.split(' ');
    assert.is(code, '200', r.stderr);
    assert.ok(await waitFor(() => held.filter((s) => s.closedAt === undefined).length === 255, 2000), 'one flood connection gave its slot');
    console.log(
      `  figures: 300 idle connections from 30 addresses, 256 held (${Math.min(...shares())}–${Math.max(...shares())} each); curl from 127.0.1.1 answered 200 in ${Math.round(Number(secs) * 1000)} ms`,
    );
  } finally {
    for (const s of held) s.destroy();
    await edge.stop(500);
    tls.close();
    rmSync(tmp, { recursive: true, force: true });
  }
});

test.run();
