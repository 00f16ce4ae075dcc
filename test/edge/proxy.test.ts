// The edge in front of server subdomains: a client that sends its request and then shuts its
// write side (`printf … | socat - TCP:…`, `nc -N`) still gets the answer, from static files and
// from a proxied app, over plain TCP and TLS; and an absolute-form request target reaches the app
// in origin-form with the target's authority as its Host. A real Edge and proxy (test/proxy
// helpers) in front of a static site and an app that is a node:http server on 127.0.0.1.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sitesOf, startEdge, DOMAIN, type TestEdge } from '../proxy/helpers.js';
import { exchange, parseAnswer } from './clients.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-edge-proxy-'));
let edge: TestEdge;
let app: Server;
const page = '<h1>a static page</h1>';

test.before(async () => {
  mkdirSync(join(top, 'static/root/www'), { recursive: true });
  writeFileSync(join(top, 'static/root/www/index.html'), page);
  mkdirSync(join(top, 'app/root'), { recursive: true });
  writeFileSync(join(top, 'app/root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(top, 'app/root/run.sh'), 0o755);
  // answers after the whole request arrived, and a little later (the client's FIN comes first)
  app = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => setTimeout(() => res.end(JSON.stringify({ url: req.url, host: req.headers.host, body })), 50));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const port = (app.address() as AddressInfo).port;
  edge = await startEdge({
    sites: sitesOf([
      { id: 'srv_static', slug: 'static', rootfs: join(top, 'static'), upstream: { host: '127.0.0.1', port: 1 }, neverSleep: false, suspended: false },
      { id: 'srv_app', slug: 'app', rootfs: join(top, 'app'), upstream: { host: '127.0.0.1', port }, neverSleep: false, suspended: false },
    ]),
  });
});

test.after(async () => {
  await edge?.stop();
  await new Promise((r) => app?.close(r));
  rmSync(top, { recursive: true, force: true });
});

/** `printf <request> | socat -t 5 - <address>`: socat shuts the write side at the end of its input. */
function socat(address: string, input: string): Promise<{ out: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const c = spawn('socat', ['-t', '5', '-', address]);
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('error', reject);
    c.on('close', () => resolve({ out, ms: Date.now() - t0 }));
    c.stdin.end(input);
  });
}

test('a client that shuts its write side after a GET gets the static page (socat)', async () => {
  const { out, ms } = await socat(`TCP:127.0.0.1:${edge.http}`, `GET / HTTP/1.1\r\nHost: static.${DOMAIN}\r\n\r\n`);
  const a = parseAnswer(out);
  assert.is(a.status, 200, out);
  assert.is(a.body, page);
  assert.ok(ms < 4000, `the edge closed after the answer (socat took ${ms} ms)`);
});

test("a client that shuts its write side gets the proxied app's answer: GET and POST, socat and a node socket", async () => {
  const get = parseAnswer((await socat(`TCP:127.0.0.1:${edge.http}`, `GET /hello?x=1 HTTP/1.1\r\nHost: app.${DOMAIN}\r\n\r\n`)).out);
  assert.is(get.status, 200);
  assert.equal(JSON.parse(get.body), { url: '/hello?x=1', host: `app.${DOMAIN}`, body: '' });
  const post = await exchange(edge.http, `POST /up HTTP/1.1\r\nHost: app.${DOMAIN}\r\nContent-Length: 5\r\n\r\nhello`, { end: true });
  assert.is(post.status, 200, post.text);
  assert.equal(JSON.parse(post.body), { url: '/up', host: `app.${DOMAIN}`, body: 'hello' });
  assert.ok(post.closed, 'the edge closes once the answer is out');
  const chunked = await exchange(edge.http, `POST /chunks HTTP/1.1\r\nHost: app.${DOMAIN}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`, {
    end: true,
  });
  assert.equal(JSON.parse(chunked.body).body, 'abc');
});

test('a TLS client that shuts its write side after its request gets the answer (socat OPENSSL)', async () => {
  const ca = edge.caFile;
  for (const [host, check] of [
    [`app.${DOMAIN}`, (body: string) => assert.is(JSON.parse(body).url, '/tls')],
    [`static.${DOMAIN}`, (body: string) => assert.is(body, page)],
  ] as const) {
    const { out } = await socat(
      `OPENSSL:127.0.0.1:${edge.https},cafile=${ca},commonname=${host},snihost=${host}`,
      `GET ${host.startsWith('app') ? '/tls' : '/'} HTTP/1.1\r\nHost: ${host}\r\n\r\n`,
    );
    const a = parseAnswer(out);
    assert.is(a.status, 200, `${host}: ${out.slice(0, 200)}`);
    check(a.body);
  }
  assert.ok(readFileSync(ca).length > 0);
});

test("an absolute-form target reaches the app in origin-form, with the target's authority as Host", async () => {
  const a = await exchange(edge.http, `GET http://app.${DOMAIN}:${edge.http}/abs?q=1 HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n`);
  assert.is(a.status, 200, a.text);
  assert.equal(JSON.parse(a.body), { url: '/abs?q=1', host: `app.${DOMAIN}:${edge.http}`, body: '' });
  const root = await exchange(edge.http, `GET http://app.${DOMAIN}?q=2 HTTP/1.1\r\nConnection: close\r\n\r\n`);
  assert.is(JSON.parse(root.body).url, '/?q=2');
  const stat = await exchange(edge.http, `GET http://static.${DOMAIN}/ HTTP/1.1\r\nHost: app.${DOMAIN}\r\nConnection: close\r\n\r\n`);
  assert.is(stat.body, page);
});

test.run();
