// One code, one answer, whoever writes it: for every code of the catalogue (with each kind it
// may take) the router behind the real edge, the proxy's error page and a raw answer written
// straight onto a socket (what the edge and the proxy do without a response object) give the same
// status, the same {error, detail, …} body and the same Retry-After / Allow / X-Request-Id. Then
// the answers the real edge and proxy give both ways: an unknown or suspended server asked for a
// page and a WebSocket, a refused method from the router and a CONNECT, a 429 over HTTP and at
// the connection cap.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Edge, TlsManager } from '../../src/edge/index.js';
import { AppError, CATALOGUE, type ErrorCode, type ErrorKind } from '../../src/errors.js';
import { rawError, Router, statusOf } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy, type Proxy } from '../../src/proxy/index.js';
import { sendErrorPage } from '../../src/proxy/pages.js';
import { tooMany } from '../../src/ratelimit.js';
import { runningRuntime, sitesOf, testConfig } from '../proxy/helpers.js';

const DOMAIN = 'rbx.test';
const RID = 'req-catalogue-compare-1';

// every code with each of its kinds, and the options that add headers and fields
const samples: AppError[] = [];
for (const [code, entry] of Object.entries(CATALOGUE) as [ErrorCode, (typeof CATALOGUE)[ErrorCode]][]) {
  for (const kind of [entry.kind, ...entry.also] as ErrorKind[]) {
    samples.push(new AppError(...([kind, code, `the detail of ${code} as ${kind}`] as ConstructorParameters<typeof AppError>)));
  }
}
samples.push(
  tooMany('rate_limited', 'too many requests from this address', 7),
  AppError.of('port_limit', 'a server may expose 3 ports', { extra: { limit: 3, scope: 'server', tier: 'free' } }),
  AppError.of('method_not_allowed', 'use GET', { headers: { allow: 'GET, HEAD' } }),
  AppError.of('wake_failed', 'the server could not be started', { retryAfter: 5 }),
  AppError.of('server_creating', 'still being created', { headers: { 'retry-after': '2' } }),
  AppError.of('too_many_connections', 'this host is full', { kind: 'unavailable', retryAfter: 1 }),
);

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
  raw: string;
}

/** Sends one request and reads the answer up to the close, parsing it by hand. */
function ask(port: number, request: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s: Socket = connect({ host: '127.0.0.1', port });
    let got = '';
    const t = setTimeout(() => s.destroy(new Error(`no close; got ${got.slice(0, 200)}`)), 5000);
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('error', reject);
    s.on('close', () => {
      clearTimeout(t);
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return reject(new Error(`no answer head: ${JSON.stringify(got.slice(0, 200))}`));
      const [statusLine, ...lines] = got.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      const text = got.slice(end + 4);
      let body: Record<string, unknown> = {};
      try {
        body = JSON.parse(text);
      } catch {
        body = { unparsed: text };
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body, raw: got });
    });
    s.write(request);
  });
}

const get = (host: string, path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nX-Request-Id: ${RID}\r\nConnection: close\r\n${extra}\r\n`;
const upgrade = (host: string) =>
  `GET /socket HTTP/1.1\r\nHost: ${host}\r\nX-Request-Id: ${RID}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;

let edge: Edge;
let tls: TlsManager;
let proxy: Proxy;
let pages: Server;
let raw: NetServer;
let dataDir: string;

test.before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'rbx-answers-'));
  const log = createLogger({ level: 'error', sink: () => {} });
  const router = new Router(log).on('GET', '/e/:i', (ctx) => {
    throw samples[Number(ctx.params.i)];
  });
  const sites = sitesOf([{ id: 'srv_paused', slug: 'paused', rootfs: dataDir, upstream: { host: '127.0.0.1', port: 9 }, neverSleep: false, suspended: true }]);
  proxy = createProxy({ log, sites, runtime: runningRuntime(sites), cfg: testConfig() });
  tls = new TlsManager({ domain: DOMAIN, dataDir, log });
  edge = new Edge({
    domain: DOMAIN,
    http: { host: '127.0.0.1', port: 0, redirect: false, maxConnectionsPerAddress: 4 },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: router, verify: router, proxy },
  });
  await edge.start();
  proxy.start();
  pages = createServer((req, res) => sendErrorPage(req, res, samples[Number(req.url!.split('/')[2])], RID));
  raw = createNetServer((sock) => {
    sock.once('data', (d) => rawError(sock, samples[Number(d.toString('latin1').split(' ')[1].split('/')[2])], { requestId: RID }));
  });
  await new Promise<void>((r) => pages.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => raw.listen(0, '127.0.0.1', r));
});

test.after(async () => {
  await proxy?.stop();
  await edge?.stop(200);
  tls?.close();
  await new Promise((r) => pages?.close(r));
  await new Promise((r) => raw?.close(r));
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const port = (s: Server | NetServer) => (s.address() as AddressInfo).port;
const compared = ['retry-after', 'allow', 'x-request-id', 'content-type', 'connection'];
const pick = (h: Record<string, string>, names = compared) => Object.fromEntries(names.filter((n) => h[n] !== undefined).map((n) => [n, h[n]]));

test('the router, the proxy page and a raw answer agree for every code and kind: status, body, Retry-After, Allow, X-Request-Id', async () => {
  assert.ok(samples.length > 110, `${samples.length} samples`);
  for (let i = 0; i < samples.length; i++) {
    const err = samples[i];
    const what = `${err.code} as ${err.kind}`;
    const viaRouter = await ask(edge.ports.http, get(`api.${DOMAIN}`, `/e/${i}`));
    const viaPage = await ask(port(pages), get('x', `/e/${i}`));
    const viaRaw = await ask(port(raw), get('x', `/e/${i}`));
    const status = statusOf(err.kind);
    for (const [name, a] of [
      ['router', viaRouter],
      ['page', viaPage],
      ['raw', viaRaw],
    ] as const) {
      assert.is(a.status, status, `${what} via ${name}: ${a.raw.slice(0, 300)}`);
      assert.is(a.body.error, err.code, `${what} via ${name}`);
      assert.is(a.body.detail, err.detail, `${what} via ${name}`);
      assert.is(a.headers['content-type'], 'application/json; charset=utf-8', `${what} via ${name}`);
      assert.is(a.headers['x-request-id'], RID, `${what} via ${name}`);
      assert.is(a.body.request_id, status >= 500 ? RID : undefined, `${what} via ${name}: request_id on every 5xx`);
    }
    assert.equal(viaPage.body, viaRouter.body, `${what}: page body = router body`);
    assert.equal(viaRaw.body, viaRouter.body, `${what}: raw body = router body`);
    const names = compared.filter((n) => n !== 'connection' && n !== 'content-type');
    assert.equal(pick(viaPage.headers, names), pick(viaRouter.headers, names), `${what}: page headers`);
    assert.equal(pick(viaRaw.headers, names), pick(viaRouter.headers, names), `${what}: raw headers`);
    assert.is(viaRaw.headers.connection, 'close');
    if (err.retryAfter !== undefined || err.headers?.['retry-after']) {
      const s = Number(viaRouter.headers['retry-after']);
      assert.ok(s >= 1, `${what}: Retry-After ${viaRouter.headers['retry-after']}`);
      assert.is(viaRouter.body.retry_after, s, `${what}: retry_after in the body is the Retry-After header`);
    } else assert.is(viaRouter.body.retry_after, undefined, what);
  }
});

test('an unknown server answers a page and a WebSocket alike, through the real edge and proxy', async () => {
  const page = await ask(edge.ports.http, get(`nosuch.${DOMAIN}`, '/'));
  const ws = await ask(edge.ports.http, upgrade(`nosuch.${DOMAIN}`));
  assert.is(page.status, 404);
  assert.is(ws.status, page.status, ws.raw);
  assert.equal(ws.body, page.body);
  assert.is(page.body.error, 'unknown_server');
  assert.is(ws.headers['x-request-id'], RID);
  assert.is(page.headers['x-request-id'], RID);
});

test('a suspended server answers a page and a WebSocket alike: 402 with the same body', async () => {
  const page = await ask(edge.ports.http, get(`paused.${DOMAIN}`, '/'));
  const ws = await ask(edge.ports.http, upgrade(`paused.${DOMAIN}`));
  assert.is(page.status, 402);
  assert.is(ws.status, 402, ws.raw);
  assert.equal(ws.body, page.body);
  assert.is(page.body.error, 'server_suspended');
});

test('a method the router refuses and a CONNECT at the edge are both 405 method_not_allowed {error, detail}', async () => {
  const routed = await ask(edge.ports.http, `POST /e/0 HTTP/1.1\r\nHost: api.${DOMAIN}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
  const connected = await ask(edge.ports.http, `CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n`);
  for (const a of [routed, connected]) {
    assert.is(a.status, 405, a.raw);
    assert.is(a.body.error, 'method_not_allowed');
    assert.equal(Object.keys(a.body).sort(), ['detail', 'error']);
    assert.is(a.headers['content-type'], 'application/json; charset=utf-8');
  }
});

test('the connection cap answers a 429 built like every other: Retry-After and retry_after, "retry in N s"', async () => {
  const held: Socket[] = [];
  try {
    for (let i = 0; i < 4; i++) {
      const s = connect({ host: '127.0.0.1', port: edge.ports.http });
      s.on('error', () => {});
      await new Promise((r) => s.once('connect', r));
      held.push(s);
    }
    for (let i = 0; i < 50 && edge.connections('127.0.0.1') < 4; i++) await new Promise((r) => setTimeout(r, 20));
    const refused = await ask(edge.ports.http, get(`api.${DOMAIN}`, '/e/0'));
    const limited = tooMany('too_many_connections', 'x', 1);
    assert.is(refused.status, statusOf(limited.kind), refused.raw);
    assert.is(refused.body.error, 'too_many_connections');
    assert.is(refused.headers['retry-after'], '1');
    assert.is(refused.body.retry_after, 1);
    assert.match(String(refused.body.detail), /; retry in 1 s$/);
    assert.equal(Object.keys(refused.body).sort(), ['detail', 'error', 'retry_after']);
  } finally {
    for (const s of held) s.destroy();
  }
});

test.run();
