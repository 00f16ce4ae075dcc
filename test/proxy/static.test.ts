// Static serving of /root/www from a directory laid out like a server's rootfs host view (which
// is exactly what the runtime mounts): content, caching, ranges, and every escape attempt.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { walk, openInside } from '../../src/proxy/resolve.js';
import { get, raw, sitesOf, startEdge, DOMAIN, type TestEdge } from './helpers.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-static-'));
const rootfs = join(top, 'rootfs');
const empty = join(top, 'empty-rootfs');
const www = join(rootfs, 'root/www');
let edge: TestEdge;
let unixServer: Server;
const host = `site.${DOMAIN}`;
const hostShadow = readFileSync('/etc/shadow', 'utf8');
const big = Buffer.alloc(300_000, 0).map((_, i) => i % 251);
const egress = new Map<string, number>();

test.before(async () => {
  mkdirSync(join(www, 'sub'), { recursive: true });
  mkdirSync(join(rootfs, 'etc'), { recursive: true });
  mkdirSync(join(empty, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'etc/hostname'), 'container-hostname\n');
  writeFileSync(join(www, 'index.html'), '<h1>home</h1>');
  writeFileSync(join(www, 'sub/index.html'), '<h1>sub</h1>');
  writeFileSync(join(www, 'style.css'), 'body{}');
  writeFileSync(join(www, 'data.json'), '{"a":1}');
  writeFileSync(join(www, 'noext'), 'x');
  writeFileSync(join(www, 'big.bin'), big);
  writeFileSync(join(www, 'a b.txt'), 'spaced');
  utimesSync(join(www, 'style.css'), new Date('2024-01-02T03:04:05Z'), new Date('2024-01-02T03:04:05Z'));
  symlinkSync('/etc/shadow', join(www, 'shadow')); // absolute: the container's /etc/shadow, which does not exist
  symlinkSync('../../../../../../../../etc/shadow', join(www, 'rel-shadow'));
  symlinkSync('/etc/hostname', join(www, 'hostname')); // absolute: the container's own file
  symlinkSync('/', join(www, 'rootdir'));
  symlinkSync('/dev/zero', join(www, 'zero'));
  symlinkSync('loop2', join(www, 'loop1'));
  symlinkSync('loop1', join(www, 'loop2'));
  symlinkSync('sub', join(www, 'sublink'));
  execFileSync('mkfifo', [join(www, 'fifo')]);
  execFileSync('mknod', [join(www, 'zerodev'), 'c', '1', '5']);
  unixServer = createServer(() => {});
  await new Promise<void>((r) => unixServer.listen(join(www, 'sock'), r));
  edge = await startEdge({
    egress: (id, n) => egress.set(id, (egress.get(id) ?? 0) + n),
    sites: sitesOf([
      { id: 'srv_site', slug: 'site', rootfs, upstream: { host: '127.0.0.1', port: 1 }, neverSleep: false, suspended: false },
      { id: 'srv_empty', slug: 'empty', rootfs: empty, upstream: { host: '127.0.0.1', port: 1 }, neverSleep: false, suspended: false },
    ]),
  });
});

test.after(async () => {
  await edge?.stop();
  await new Promise((r) => unixServer?.close(r));
  rmSync(top, { recursive: true, force: true });
});

test('index.html is served at / with its content type, ETag and Last-Modified', async () => {
  const r = await get(edge.http, host, '/');
  assert.is(r.status, 200);
  assert.is(r.text, '<h1>home</h1>');
  assert.is(r.headers['content-type'], 'text/html; charset=utf-8');
  assert.ok(r.headers.etag);
  assert.ok(r.headers['last-modified']);
  assert.is(r.headers['x-content-type-options'], 'nosniff');
});

test('content types follow the extension; unknown ones are octet-stream; escaped names resolve', async () => {
  assert.is((await get(edge.http, host, '/style.css')).headers['content-type'], 'text/css; charset=utf-8');
  assert.is((await get(edge.http, host, '/data.json')).headers['content-type'], 'application/json; charset=utf-8');
  assert.is((await get(edge.http, host, '/noext')).headers['content-type'], 'application/octet-stream');
  assert.is((await get(edge.http, host, '/a%20b.txt')).text, 'spaced');
});

test('a directory without a trailing slash redirects; with it, its index.html is served', async () => {
  const r = await get(edge.http, host, '/sub?x=1');
  assert.is(r.status, 301);
  assert.is(r.headers.location, '/sub/?x=1');
  assert.is((await get(edge.http, host, '/sub/')).text, '<h1>sub</h1>');
  assert.is((await get(edge.http, host, '/sublink/')).text, '<h1>sub</h1>');
  const slashes = await get(edge.http, host, '//sub');
  assert.is(slashes.headers.location, '/sub/', 'no protocol-relative open redirect');
});

test('If-None-Match and If-Modified-Since answer 304 without a body', async () => {
  const first = await get(edge.http, host, '/style.css');
  const a = await get(edge.http, host, '/style.css', { headers: { 'if-none-match': first.headers.etag! } });
  assert.is(a.status, 304);
  assert.is(a.body.length, 0);
  const b = await get(edge.http, host, '/style.css', { headers: { 'if-modified-since': 'Tue, 02 Jan 2024 03:04:05 GMT' } });
  assert.is(b.status, 304);
  const c = await get(edge.http, host, '/style.css', { headers: { 'if-modified-since': 'Mon, 01 Jan 2024 00:00:00 GMT' } });
  assert.is(c.status, 200);
  const d = await get(edge.http, host, '/style.css', { headers: { 'if-none-match': '"other"' } });
  assert.is(d.status, 200);
});

test('Range requests get 206 with the right bytes; suffix ranges; 416 beyond the end; HEAD has no body', async () => {
  const r = await get(edge.http, host, '/big.bin', { headers: { range: 'bytes=1000-1999' } });
  assert.is(r.status, 206);
  assert.is(r.headers['content-range'], `bytes 1000-1999/${big.length}`);
  assert.ok(r.body.equals(big.subarray(1000, 2000)));
  const s = await get(edge.http, host, '/big.bin', { headers: { range: 'bytes=-10' } });
  assert.ok(s.body.equals(big.subarray(big.length - 10)));
  const open = await get(edge.http, host, '/big.bin', { headers: { range: 'bytes=299990-' } });
  assert.is(open.body.length, 10);
  const bad = await get(edge.http, host, '/big.bin', { headers: { range: 'bytes=400000-' } });
  assert.is(bad.status, 416);
  assert.is(bad.headers['content-range'], `bytes */${big.length}`);
  const stale = await get(edge.http, host, '/big.bin', { headers: { range: 'bytes=0-9', 'if-range': '"stale"' } });
  assert.is(stale.status, 200);
  assert.is(stale.body.length, big.length);
  const full = await get(edge.http, host, '/big.bin');
  assert.ok(full.body.equals(big));
  const head = await get(edge.http, host, '/big.bin', { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.is(head.headers['content-length'], String(big.length));
  assert.is(head.body.length, 0);
});

test('other methods get 405 with Allow', async () => {
  const r = await get(edge.http, host, '/', { method: 'POST', body: 'x' });
  assert.is(r.status, 405);
  assert.is(r.headers.allow, 'GET, HEAD');
});

test("an absolute symlink to /etc/shadow resolves in the container's root, never the host's", async () => {
  for (const p of ['/shadow', '/rel-shadow', '/rootdir/etc/shadow', '/zero']) {
    const r = await get(edge.http, host, p);
    assert.is(r.status, 404, p);
    assert.not.ok(hostShadow.length > 0 && r.text.includes(hostShadow.slice(0, 20)), `${p} leaked the host's shadow file`);
  }
  assert.is((await get(edge.http, host, '/hostname')).text, 'container-hostname\n');
  assert.is((await get(edge.http, host, '/rootdir/etc/hostname')).text, 'container-hostname\n');
});

test('raw ../, %2e%2e%2f, ..%2f, %2f, NUL and bad escapes are refused with 400 and never reach a host file', async () => {
  for (const p of [
    '/../../../../etc/shadow',
    '/%2e%2e/%2e%2e/etc/shadow',
    '/%2e%2e%2f%2e%2e%2fetc/shadow',
    '/..%2f..%2fetc/shadow',
    '/sub%2f..%2f..%2fetc',
    '/index.html%00.txt',
    '/%zz',
  ]) {
    const reply = await raw(edge.http, `GET ${p} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    assert.match(reply, /^HTTP\/1\.1 400 /, p);
    assert.not.ok(reply.includes('root:'), p);
  }
  // `..` that stays inside the site is plain normalization
  assert.is((await get(edge.http, host, '/sub/../style.css')).text, 'body{}');
});

test('a fifo, a device node, a socket and a symlink loop answer 404 at once instead of hanging', async () => {
  for (const p of ['/fifo', '/zerodev', '/sock', '/loop1']) {
    const started = Date.now();
    const r = await get(edge.http, host, p);
    assert.is(r.status, 404, p);
    assert.ok(Date.now() - started < 2000, `${p} took ${Date.now() - started} ms`);
  }
});

test('a directory swapped for a symlink to the host /etc after the walk is refused at open', async () => {
  mkdirSync(join(www, 'race'));
  writeFileSync(join(www, 'race/shadow'), 'inside');
  const found = await walk(rootfs, ['root', 'www', 'race', 'shadow']);
  assert.ok(found);
  renameSync(join(www, 'race'), join(www, 'race-old'));
  symlinkSync('/etc', join(www, 'race'));
  assert.is(await openInside(rootfs, found!), undefined);
});

test('a server with nothing published shows the friendly page at / and 404 elsewhere', async () => {
  const r = await get(edge.http, `empty.${DOMAIN}`, '/', { headers: { accept: 'text/html' } });
  assert.is(r.status, 200);
  assert.match(r.text, /\/root\/www/);
  assert.match(r.text, /\/root\/run\.sh/);
  const j = await get(edge.http, `empty.${DOMAIN}`, '/');
  assert.is(JSON.parse(j.text).published, false);
  assert.is((await get(edge.http, `empty.${DOMAIN}`, '/x.html')).status, 404);
});

test('an unknown slug is 404 unknown_server', async () => {
  const r = await get(edge.http, `nosuch.${DOMAIN}`, '/');
  assert.is(r.status, 404);
  assert.is(JSON.parse(r.text).error, 'unknown_server');
});

test('pipelined answers on one connection are billed once each: the bytes written, heads included', async () => {
  egress.clear();
  const one = (path: string, last = false) => `GET ${path} HTTP/1.1\r\nhost: ${host}\r\n${last ? 'connection: close\r\n' : ''}\r\n`;
  const out = await raw(edge.http, one('/big.bin') + one('/') + one('/big.bin') + one('/nothing-here') + one('/big.bin', true), 10_000);
  assert.is(out.split('HTTP/1.1 ').length - 1, 5);
  const sent = Buffer.byteLength(out, 'latin1');
  assert.ok(sent > 3 * big.length);
  const end = Date.now() + 5000;
  while ((egress.get('srv_site') ?? 0) < sent && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 200));
  assert.is(egress.get('srv_site'), sent);
});

test.run();
