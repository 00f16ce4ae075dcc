// The edge's lane (src/edge/lane.ts + src/proxy/direct.ts): plain GET/HEAD requests to an awake
// app are read and answered without node's HTTP server, everything else moves the connection to
// node's server, and the answers are the same either way. A real Edge and proxy (test/proxy
// helpers) in front of apps on 127.0.0.1: a node:http app that answers in the shapes an app can
// (length, chunked, close-delimited, 204, 304, HEAD, its own request id, repeated headers), a raw
// app that counts requests and answers garbage, and a second edge with the lane off to compare.
// The lane's own answers are told apart by what node's server adds to an answer that keeps the
// connection open and the lane does not (`Keep-Alive: timeout=5`).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from '../proxy/helpers.js';
import { exchange, parseAnswer } from './clients.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-lane-'));
let lane: TestEdge;
let full: TestEdge;
let app: Server;
let liar: NetServer;
let liarRequests = 0;
const egress = new Map<string, number>();
const BIG = Buffer.alloc(4 * 1024 * 1024, 'abcdefghijklmnopqrstuvwxyz');

test.before(async () => {
  for (const n of ['app', 'liar']) {
    mkdirSync(join(top, n, 'root'), { recursive: true });
    writeFileSync(join(top, n, 'root/run.sh'), '#!/bin/sh\n');
    chmodSync(join(top, n, 'root/run.sh'), 0o755);
  }
  app = createServer((req, res) => {
    const u = req.url ?? '/';
    if (u === '/len') return res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 5, 'set-cookie': ['a=1', 'b=2'] }).end('hello');
    if (u === '/chunked') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('one,');
      return setTimeout(() => res.end('two'), 20);
    }
    if (u === '/none') return res.writeHead(204).end();
    if (u === '/same') return res.writeHead(304, { etag: '"x"' }).end();
    if (u === '/rid') return res.writeHead(200, { 'x-request-id': 'app-chose-this', 'content-length': 2 }).end('ok');
    if (u === '/big') return res.writeHead(200, { 'content-length': BIG.length }).end(BIG);
    if (u === '/close') {
      // a close-delimited answer: no length, HTTP/1.0 style
      res.socket!.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nto the end');
      return;
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body })));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  liar = createNetServer((s) => {
    s.on('data', () => {
      liarRequests++;
      s.end('HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!');
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => liar.listen(0, '127.0.0.1', r));
  const sites = () =>
    sitesOf([
      {
        id: 'srv_app',
        slug: 'app',
        rootfs: join(top, 'app'),
        upstream: { host: '127.0.0.1', port: (app.address() as AddressInfo).port },
        neverSleep: false,
        suspended: false,
      },
      {
        id: 'srv_liar',
        slug: 'liar',
        rootfs: join(top, 'liar'),
        upstream: { host: '127.0.0.1', port: (liar.address() as AddressInfo).port },
        neverSleep: false,
        suspended: false,
      },
    ]);
  lane = await startEdge({ sites: sites(), egress: (id, n) => egress.set(id, (egress.get(id) ?? 0) + n) });
  full = await startEdge({ sites: sites(), cfg: testConfig({ lane: 'off' }) });
  // the first request to a server goes the full way (its app is not yet known to be up)
  for (const e of [lane, full])
    for (const h of ['app', 'liar']) await exchange(e.http, `GET /len HTTP/1.1\r\nHost: ${h}.${DOMAIN}\r\nConnection: close\r\n\r\n`);
});

test.after(async () => {
  await lane?.stop();
  await full?.stop();
  await new Promise((r) => app?.close(r));
  await new Promise((r) => liar?.close(r));
  rmSync(top, { recursive: true, force: true });
});

/** Every answer on one connection (requests sent at once, pipelined), split by their framing. */
async function answers(port: number, requests: string[]): Promise<Array<ReturnType<typeof parseAnswer> & { raw: string }>> {
  const a = await exchange(port, requests.join(''), { timeoutMs: 3000 });
  const out: Array<ReturnType<typeof parseAnswer> & { raw: string }> = [];
  let rest = a.text;
  while (rest.length > 0) {
    const end = rest.indexOf('\r\n\r\n');
    const head = parseAnswer(rest.slice(0, end + 4));
    let size = 0;
    let body = '';
    if (head.headers['content-length'] !== undefined) {
      size = end + 4 + Number(head.headers['content-length']);
      body = rest.slice(end + 4, size);
    } else if (head.headers['transfer-encoding'] === 'chunked') {
      let at = end + 4;
      for (;;) {
        const eol = rest.indexOf('\r\n', at);
        const n = parseInt(rest.slice(at, eol), 16);
        body += rest.slice(eol + 2, eol + 2 + n);
        at = eol + 2 + n + 2;
        if (n === 0) break;
      }
      size = at;
    } else size = end + 4;
    out.push({ ...head, body, raw: rest.slice(0, size) });
    rest = rest.slice(size);
  }
  return out;
}

const get = (path: string, host = 'app', extra = '') => `GET ${path} HTTP/1.1\r\nHost: ${host}.${DOMAIN}\r\n${extra}\r\n`;
const laneAnswered = (a: { headers: Record<string, string> }) => a.headers['keep-alive'] === undefined;

test('the lane answers pipelined GETs to an awake app on one connection, each as node would frame it', async () => {
  const paths = ['/len', '/chunked', '/none', '/same', '/rid'];
  const byLane = await answers(lane.http, [...paths.map((p) => get(p)), get('/len', 'app', 'Connection: close\r\n')]);
  const byNode = await answers(full.http, [...paths.map((p) => get(p)), get('/len', 'app', 'Connection: close\r\n')]);
  assert.is(byLane.length, paths.length + 1);
  for (const a of byLane.slice(0, -1)) assert.ok(laneAnswered(a), `the lane answered: ${a.raw.slice(0, 200)}`);
  for (const a of byNode.slice(0, -1)) assert.not.ok(laneAnswered(a), 'lane off: node answered ' + a.raw);
  for (let i = 0; i < byLane.length; i++) {
    assert.is(byLane[i].status, byNode[i].status, paths[i]);
    assert.is(byLane[i].body, byNode[i].body, paths[i]);
    for (const h of ['content-type', 'content-length', 'transfer-encoding', 'etag', 'date'])
      assert.is(byLane[i].headers[h] === undefined, byNode[i].headers[h] === undefined, `${paths[i]} ${h}`);
    assert.match(byLane[i].headers['x-request-id'] ?? '', /^[\w.-]{8,64}$/);
  }
  assert.match(byLane[0].raw, /set-cookie: a=1\r\nset-cookie: b=2\r\n/i);
  assert.is(byLane[1].body, 'one,two');
  assert.is(byLane[4].headers['x-request-id'], 'app-chose-this');
  assert.is(byLane[5].headers.connection, 'close');
});

test('a close-delimited answer is re-framed as chunked, and HEAD gets the head only', async () => {
  const [close, head] = await answers(lane.http, [get('/close'), `HEAD /len HTTP/1.1\r\nHost: app.${DOMAIN}\r\nConnection: close\r\n\r\n`]);
  assert.is(close.status, 200);
  assert.is(close.headers['transfer-encoding'], 'chunked');
  assert.is(close.body, 'to the end');
  assert.is(head.status, 200);
  assert.is(head.headers['content-length'], '5');
  assert.is(head.body, '');
});

test("the app gets the client's headers with ours, never the client's X-Forwarded-* claims", async () => {
  const [a] = await answers(lane.http, [get('/echo', 'app', 'X-Forwarded-For: 6.6.6.6\r\nX-Custom: kept\r\nConnection: close, x-gone\r\nX-Gone: 1\r\n')]);
  assert.ok(laneAnswered(a));
  const seen = JSON.parse(a.body) as { headers: Record<string, string> };
  assert.is(seen.headers['x-forwarded-for'], '127.0.0.1');
  assert.is(seen.headers['x-forwarded-proto'], 'http');
  assert.is(seen.headers['x-custom'], 'kept');
  assert.is(seen.headers['x-gone'], undefined);
  assert.is(seen.headers.host, `app.${DOMAIN}`);
});

test("a connection moves to node's server at the first request the lane does not take, and keeps its order", async () => {
  const post = `POST /up HTTP/1.1\r\nHost: app.${DOMAIN}\r\nContent-Length: 5\r\n\r\nhello`;
  const [a, b, c] = await answers(lane.http, [get('/echo'), post, get('/echo'), get('/len', 'app', 'Connection: close\r\n')]);
  assert.ok(laneAnswered(a));
  assert.is(JSON.parse(a.body).method, 'GET');
  assert.not.ok(laneAnswered(b), 'node answered the POST');
  assert.equal([JSON.parse(b.body).method, JSON.parse(b.body).body], ['POST', 'hello']);
  assert.not.ok(laneAnswered(c), 'and everything after it');
  assert.is(JSON.parse(c.body).method, 'GET');
});

test("heads the lane does not take are node's to refuse, with the same errors as before", async () => {
  const cases: Array<[string, number, string]> = [
    [`GET / HTTP/1.1\r\nHost: app.${DOMAIN}\r\nHost: liar.${DOMAIN}\r\n\r\n`, 400, 'duplicate_host'],
    [`GET / HTTP/1.1\r\nHost: app.${DOMAIN}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, 400, 'invalid_framing'],
    [`GET / HTTP/1.1\r\nHost: app.${DOMAIN}\r\nX-A: 1\r\n folded\r\n\r\n`, 400, 'invalid_header'],
    [`GET / HTTP/1.1\r\nHost: app.${DOMAIN}\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`, 431, 'header_too_large'],
  ];
  for (const [req, status, code] of cases) {
    const a = await exchange(lane.http, req, { timeoutMs: 3000 });
    assert.is(a.status, status, `${code}: ${a.text.slice(0, 200)}`);
    assert.is(JSON.parse(a.body).error, code);
  }
});

test('an app that answers garbage after taking the request: one 502 page, the request not sent twice', async () => {
  const before = liarRequests;
  const a = await exchange(lane.http, get('/', 'liar', 'Connection: close\r\n'), { timeoutMs: 3000 });
  assert.is(a.status, 502, a.text);
  assert.is(JSON.parse(a.body).error, 'bad_gateway');
  assert.is(liarRequests - before, 1);
});

test('egress of lane answers is what the client received, head included', async () => {
  const before = egress.get('srv_app') ?? 0;
  const all = await answers(lane.http, [get('/len'), get('/chunked'), get('/len', 'app', 'Connection: close\r\n')]);
  const received = all.reduce((n, a) => n + Buffer.byteLength(a.raw, 'latin1'), 0);
  await new Promise((r) => setTimeout(r, 50));
  assert.is((egress.get('srv_app') ?? 0) - before, received);
});

test('an app that stopped listening: the lane answers the app_down page once, as the full path does', async () => {
  const gone = createServer((_req, res) => res.end('up'));
  await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
  const port = (gone.address() as AddressInfo).port;
  mkdirSync(join(top, 'gone/root'), { recursive: true });
  writeFileSync(join(top, 'gone/root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(top, 'gone/root/run.sh'), 0o755);
  const e = await startEdge({
    sites: sitesOf([{ id: 'srv_gone', slug: 'gone', rootfs: join(top, 'gone'), upstream: { host: '127.0.0.1', port }, neverSleep: false, suspended: false }]),
  });
  try {
    const up = await answers(e.http, [get('/', 'gone'), get('/', 'gone', 'Connection: close\r\n')]);
    assert.equal(
      up.map((a) => [a.status, a.body]),
      [
        [200, 'up'],
        [200, 'up'],
      ],
    );
    assert.ok(laneAnswered(up[0]));
    gone.closeAllConnections();
    await new Promise((r) => gone.close(r));
    const down = await exchange(e.http, get('/', 'gone', 'Connection: close\r\n'), { timeoutMs: 5000 });
    assert.is(down.status, 502, down.text);
    assert.is(JSON.parse(down.body).error, 'app_down');
    assert.is(down.text.split('HTTP/1.1 ').length, 2, 'one answer');
  } finally {
    await e.stop();
  }
});

test('a head trickled a byte at a time, and requests pipelined byte by byte behind an answer, are all answered in order', async () => {
  const { connect } = await import('node:net');
  const text = get('/len') + get('/echo') + get('/len', 'app', 'Connection: close\r\n');
  const got = await new Promise<string>((resolve) => {
    const s = connect({ host: '127.0.0.1', port: lane.http });
    let out = '';
    s.on('data', (d) => (out += d.toString('latin1')));
    s.on('close', () => resolve(out));
    s.on('connect', async () => {
      for (const ch of text) {
        s.write(ch);
        await new Promise((r) => setTimeout(r, 1));
      }
    });
  });
  const statuses = [...got.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
  assert.equal(statuses, [200, 200, 200], got.slice(0, 300));
  assert.is(got.split('hello').length, 3);
  assert.match(got, /"method":"GET"/);
});

test('a 4 MiB answer read slowly arrives whole (back-pressure both ways)', async () => {
  const { connect } = await import('node:net');
  const s = connect({ host: '127.0.0.1', port: lane.http });
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve) => {
    s.on('connect', () => s.write(get('/big', 'app', 'Connection: close\r\n')));
    s.pause();
    const t = setInterval(() => s.read() && s.resume() && s.pause(), 5);
    s.on('data', (d) => chunks.push(d));
    s.on('close', () => (clearInterval(t), resolve()));
    setTimeout(() => s.resume(), 300);
  });
  const text = Buffer.concat(chunks);
  const end = text.indexOf('\r\n\r\n');
  const body = text.subarray(end + 4);
  assert.is(body.length, BIG.length);
  assert.is(createHash('sha256').update(body).digest('hex'), createHash('sha256').update(BIG).digest('hex'));
});

test("an idle lane connection is closed at the edge's head deadline, and one that sent half a head gets a 408", async () => {
  const port = (app.address() as AddressInfo).port;
  const site = { id: 'srv_app', slug: 'app', rootfs: join(top, 'app'), upstream: { host: '127.0.0.1', port }, neverSleep: false, suspended: false };
  const short = await startEdge({ sites: sitesOf([site]), headerTimeout: 300 });
  try {
    await exchange(short.http, get('/len', 'app', 'Connection: close\r\n')); // the app is known to be up from here on
    const idle = await exchange(short.http, get('/len'), { timeoutMs: 5000 });
    assert.is(idle.status, 200);
    assert.ok(laneAnswered(idle), idle.text);
    assert.ok(idle.closed && idle.closedAfter < 3000, `closed after ${idle.closedAfter} ms`);
    const half = await exchange(short.http, `GET /len HTTP/1.1\r\nHost: app.${DOMAIN}\r\n`, { timeoutMs: 5000 });
    assert.is(half.status, 408, half.text);
    assert.is(JSON.parse(half.body).error, 'request_timeout');
  } finally {
    await short.stop();
  }
});

test('HTTP/1.1 over TLS takes the lane too', async () => {
  const tls = { ca: readFileSync(lane.caFile), servername: `app.${DOMAIN}` };
  const a = await exchange(lane.https, get('/len') + get('/len', 'app', 'Connection: close\r\n'), { tls });
  assert.is(a.status, 200);
  assert.ok(laneAnswered(a), a.text);
  assert.is(a.text.split('hello').length, 3, 'two answers');
});

test.run();
