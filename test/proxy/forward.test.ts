// Forwarding to a server's app: headers both ways, hostile and dying upstreams, timeouts, 502
// pages, HTTP/2 clients, WebSockets. The apps are real servers on 127.0.0.1 written here
// (node:http for well-behaved ones, node:net for hostile ones), resolved through the Sites
// interface exactly as a container's <ip>:80 would be.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect as h2connect } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';
import type { Site } from '../../src/proxy/index.js';
import { get, raw, sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from './helpers.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-fwd-'));
const rootfs = join(top, 'rootfs');
let edge: TestEdge;
let app: Server;
let wss: WebSocketServer;
const hostile: NetServer[] = [];
const sockets = new Set<Socket>();

/** Hostile upstreams: each answers every request with these raw bytes (then maybe closes). */
const RAW: Record<string, { reply: string; close: boolean }> = {
  garbage: { reply: 'HELLO THERE\r\n\r\n', close: true },
  badheader: { reply: 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBad Header: x\r\n\r\nok', close: true },
  status999: { reply: 'HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\nok', close: true },
  switching: { reply: 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n', close: false },
  h2illegal: {
    reply:
      'HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\nTE: gzip\r\nTransfer-Encoding: chunked\r\nX-Kept: yes\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n2\r\nok\r\n0\r\n\r\n',
    close: false,
  },
  midway: { reply: 'HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nonly a few bytes', close: true },
  silent: { reply: '', close: false },
};
const upstreams: Record<string, number> = {};
const seen: { headers?: IncomingMessage['headers'] } = {};
const counters = { uploaded: 0, downloaded: 0 };

function site(slug: string, port: number): Site {
  return { id: `srv_${slug}`, slug, rootfs, upstream: { host: '127.0.0.1', port }, neverSleep: false, suspended: false };
}

test.before(async () => {
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\nexec true\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  app = createServer((req, res) => {
    if (req.url?.startsWith('/echo')) {
      seen.headers = req.headers;
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => res.end(JSON.stringify({ url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() })));
    } else if (req.url === '/upload') {
      req.on('data', (c: Buffer) => (counters.uploaded += c.length));
      req.on('end', () => res.end(String(counters.uploaded)));
    } else if (req.url?.startsWith('/download/')) {
      let left = Number(req.url.slice(10));
      res.writeHead(200, { 'content-length': String(left) });
      const chunk = Buffer.alloc(256 * 1024, 7);
      const pump = () => {
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          left -= n;
          counters.downloaded += n;
          if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
    } else res.end('hello from the app');
  });
  app.on('connection', (s) => sockets.add(s));
  wss = new WebSocketServer({ server: app });
  wss.on('connection', (ws, req) => {
    ws.send(`hello ${req.headers['x-forwarded-for']}`);
    ws.on('message', (m, isBinary) => ws.send(m, { binary: isBinary }));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  upstreams.app = (app.address() as AddressInfo).port;
  for (const [name, h] of Object.entries(RAW)) {
    const srv = createNetServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
      s.on('data', () => {
        s.write(h.reply);
        if (h.close) s.destroy();
      });
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    upstreams[name] = (srv.address() as AddressInfo).port;
    hostile.push(srv);
  }
  // a port nobody listens on
  const tmp = createNetServer();
  await new Promise<void>((r) => tmp.listen(0, '127.0.0.1', r));
  upstreams.refused = (tmp.address() as AddressInfo).port;
  await new Promise((r) => tmp.close(r));
  const list = Object.entries(upstreams).map(([name, port]) => site(name, port));
  edge = await startEdge({ sites: sitesOf(list), cfg: testConfig({ upstreamTimeout: '700ms', appStartGrace: '200ms' }) });
});

test.after(async () => {
  await edge?.stop();
  for (const s of sockets) s.destroy();
  wss?.close();
  await new Promise((r) => app?.close(r));
  await Promise.all(hostile.map((s) => new Promise((r) => s.close(r))));
  rmSync(top, { recursive: true, force: true });
});

const h = (name: string) => `${name}.${DOMAIN}`;

test('requests reach the app with our X-Forwarded-* (client claims replaced) and without hop-by-hop headers', async () => {
  const r = await get(edge.http, `${h('app')}:8080`, '/echo', {
    method: 'POST',
    body: 'payload',
    headers: {
      'x-forwarded-for': '6.6.6.6',
      'x-real-ip': '6.6.6.6',
      connection: 'keep-alive, x-drop-me',
      'x-drop-me': '1',
      'keep-alive': 'timeout=5',
      'proxy-authorization': 'Basic x',
      te: 'trailers',
      'x-kept': 'yes',
    },
  });
  assert.is(r.status, 200);
  const { headers, body } = JSON.parse(r.text);
  assert.is(body, 'payload');
  assert.is(headers['x-forwarded-for'], '127.0.0.1');
  assert.is(headers['x-real-ip'], '127.0.0.1');
  assert.is(headers['x-forwarded-proto'], 'http');
  assert.is(headers['x-forwarded-host'], `${h('app')}:8080`);
  assert.is(headers.host, `${h('app')}:8080`);
  assert.is(headers['x-kept'], 'yes');
  for (const gone of ['x-drop-me', 'keep-alive', 'proxy-authorization', 'te']) assert.is(headers[gone], undefined, gone);
});

test('the request target reaches the app byte for byte (no decoding or normalization)', async () => {
  for (const path of ['/echo/a%2Fb/../c?q=a%20b&r=%2e', '/echo//double//slash', '/echo/%ZZ']) {
    const r = await get(edge.http, h('app'), path);
    assert.is(JSON.parse(r.text).url, path);
  }
});

function h2request(
  path: string,
  host: string,
  opts: { method?: string; body?: Buffer } = {},
): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const session = h2connect(`https://${host}:${edge.https}`, {
      ca: readFileSync(edge.caFile),
      lookup: (_h, o, cb) => (cb as any)(null, o.all ? [{ address: '127.0.0.1', family: 4 }] : '127.0.0.1', 4),
    });
    session.on('error', reject);
    const req = session.request({ ':path': path, ':method': opts.method ?? 'GET' });
    const chunks: Buffer[] = [];
    let headers: Record<string, unknown> = {};
    req.on('response', (hd) => (headers = hd));
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      session.close();
      resolve({ status: Number(headers[':status']), headers, body: Buffer.concat(chunks) });
    });
    req.on('error', (e) => {
      session.destroy();
      reject(e);
    });
    req.end(opts.body);
  });
}

test('HTTP/2 clients get the app through the proxy, with X-Forwarded-Proto https and their body', async () => {
  const r = await h2request('/echo', h('app'), { method: 'POST', body: Buffer.from('h2 body') });
  assert.is(r.status, 200);
  const { headers, body } = JSON.parse(r.body.toString());
  assert.is(body, 'h2 body');
  assert.is(headers['x-forwarded-proto'], 'https');
  assert.is(headers.host, `${h('app')}:${edge.https}`);
});

test('HTTP/2-illegal and hop-by-hop response headers are stripped; HTTP/2 and HTTP/1.1 clients both get the answer', async () => {
  const r = await h2request('/', h('h2illegal'));
  assert.is(r.status, 200);
  assert.is(r.body.toString(), 'ok');
  for (const gone of ['connection', 'x-secret', 'keep-alive', 'upgrade', 'proxy-connection', 'te', 'transfer-encoding'])
    assert.is(r.headers[gone], undefined, gone);
  assert.is(r.headers['x-kept'], 'yes');
  assert.equal(r.headers['set-cookie'], ['a=1', 'b=2']);
  const r1 = await get(edge.http, h('h2illegal'), '/');
  assert.is(r1.text, 'ok');
  assert.is(r1.headers['x-secret'], undefined);
  assert.is(r1.headers.upgrade, undefined);
});

test('garbage, invalid headers, status 999 and a stray 101 become 502 pages, over HTTP/1.1 and HTTP/2', async () => {
  for (const name of ['garbage', 'badheader', 'status999', 'switching']) {
    const r = await get(edge.http, h(name), '/', { headers: { accept: 'text/html' } }).catch((e) => {
      throw new Error(`${name}: ${e.message}`);
    });
    assert.is(r.status, 502, name);
    assert.match(r.text, /<h1>502/, name);
    const r2 = await h2request('/', h(name));
    assert.is(r2.status, 502, `${name} over h2`);
  }
});

test('an app that dies mid-response cuts that response only; the daemon keeps serving', async () => {
  const reply = await raw(edge.http, `GET / HTTP/1.1\r\nHost: ${h('midway')}\r\n\r\n`);
  assert.match(reply, /^HTTP\/1\.1 200 /);
  assert.ok(reply.length < 100000);
  const h2 = await h2request('/', h('midway')).then(
    (r) => r.body.length,
    () => -1,
  );
  assert.ok(h2 < 100000, 'an HTTP/2 client must not see a complete body');
  assert.is((await get(edge.http, h('app'), '/')).text, 'hello from the app');
});

test('an app that never answers gets 504 after upstreamTimeout', async () => {
  const started = Date.now();
  const r = await get(edge.http, h('silent'), '/');
  assert.is(r.status, 504);
  assert.is(JSON.parse(r.text).error, 'upstream_timeout');
  assert.ok(Date.now() - started < 3000);
});

test('an app that is down gets a clear 502 page', async () => {
  const r = await get(edge.http, h('refused'), '/', { headers: { accept: 'text/html' } });
  assert.is(r.status, 502);
  assert.match(r.text, /not accepting connections on port 80/);
  assert.match(r.text, /run\.sh/);
  const j = await get(edge.http, h('refused'), '/');
  assert.is(JSON.parse(j.text).error, 'app_down');
});

function wsOpen(url: string, host: string, extra: WebSocket.ClientOptions = {}): Promise<{ ws: WebSocket; first: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { host }, ...extra });
    ws.once('message', (m) => resolve({ ws, first: m.toString() }));
    ws.once('error', reject);
  });
}

test('WebSocket echo through the proxy, over ws:// and wss://', async () => {
  for (const [url, extra] of [
    [`ws://127.0.0.1:${edge.http}/`, {}],
    [`wss://127.0.0.1:${edge.https}/`, { ca: readFileSync(edge.caFile), servername: h('app') }],
  ] as const) {
    const { ws, first } = await wsOpen(url, h('app'), extra as WebSocket.ClientOptions);
    assert.is(first, 'hello 127.0.0.1');
    const echoed = new Promise<string>((r) => ws.once('message', (m) => r(m.toString())));
    ws.send('ping through rootbox');
    assert.is(await echoed, 'ping through rootbox');
    ws.close();
  }
});

test('a WebSocket to an app that is down is refused with 502, not hung', async () => {
  const err = await wsOpen(`ws://127.0.0.1:${edge.http}/`, h('refused')).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(String(err?.message), /502/);
});

test('200 MB stream up and down through the proxy without being buffered', async () => {
  const { request } = await import('node:http');
  const total = 200 * 1024 * 1024;
  // upload: what the client has sent never runs far ahead of what the app has received
  counters.uploaded = 0;
  let maxGap = 0;
  const up = await new Promise<string>((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: edge.http, path: '/upload', method: 'POST', headers: { host: h('app'), 'content-length': String(total) }, agent: false },
      (res) => {
        let b = '';
        res.on('data', (c) => (b += c));
        res.on('end', () => resolve(b));
      },
    );
    req.on('error', reject);
    const chunk = Buffer.alloc(1024 * 1024, 1);
    let sent = 0;
    const pump = () => {
      while (sent < total) {
        sent += chunk.length;
        maxGap = Math.max(maxGap, sent - counters.uploaded);
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
  assert.is(Number(up), total);
  assert.ok(maxGap < 48 * 1024 * 1024, `upload ran ${maxGap} bytes ahead of the app`);
  // download: what the app has written never runs far ahead of what the client has read
  counters.downloaded = 0;
  let got = 0;
  maxGap = 0;
  await new Promise<void>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: edge.http, path: `/download/${total}`, headers: { host: h('app') }, agent: false }, (res) => {
      res.on('data', (c: Buffer) => {
        got += c.length;
        maxGap = Math.max(maxGap, counters.downloaded - got);
      });
      res.on('end', resolve);
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
  assert.is(got, total);
  assert.ok(maxGap < 48 * 1024 * 1024, `download: the app ran ${maxGap} bytes ahead of the client`);
});

test('the daemon survived everything above', async () => {
  assert.is((await get(edge.http, h('app'), '/')).text, 'hello from the app');
  assert.is((await h2request('/', h('app'))).body.toString(), 'hello from the app');
});

test.run();
