// The proxy's own HTTP/1.1 client. First the response reader on its own, fed byte by byte: the
// framing rules (chunked with extensions and trailers, length, close-delimited, HEAD/204/304,
// interim 1xx) and the hostile answers it must refuse. Then the client through a real edge and
// raw upstreams: kept-alive reuse, a stale connection retried, re-chunked request bodies, a
// per-server connection cap, a client leaving mid-answer, and the egress bytes reported.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, chmodSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ResponseReader, type ResponseHead } from '../../src/h1/index.js';
import type { Site } from '../../src/proxy/index.js';
import { get, sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from './helpers.js';

function read(bytes: string, opts: { head?: boolean; chunkSize?: number; eof?: boolean } = {}) {
  const out = { head: undefined as ResponseHead | undefined, body: '', ended: undefined as boolean | undefined };
  const r = new ResponseReader(
    { head: (h) => (out.head = h), data: (d) => (out.body += d.toString('latin1')), end: (reusable) => (out.ended = reusable) },
    opts.head ?? false,
  );
  const buf = Buffer.from(bytes, 'latin1');
  const step = opts.chunkSize ?? 1;
  for (let i = 0; i < buf.length && out.ended === undefined; i += step) r.feed(buf.subarray(i, i + step));
  if (opts.eof) r.eof();
  return out;
}

/** Every value of a header in a flat head list, by name in any case. */
const values = (h: ResponseHead | undefined, name: string) => (h?.headers ?? []).filter((_, i, a) => i % 2 === 1 && a[i - 1].toLowerCase() === name);

const refuses = (bytes: string, why: RegExp, opts: { head?: boolean; eof?: boolean } = {}) => assert.throws(() => read(bytes, { ...opts, chunkSize: 7 }), why);

test('reader: a chunked answer with extensions and trailers, fed a byte at a time, is decoded and reusable', () => {
  const r = read('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n');
  assert.is(r.head?.status, 200);
  assert.is(r.body, 'hello world');
  assert.is(r.ended, true);
  assert.equal(values(r.head, 'transfer-encoding'), []);
});

test('reader: hop-by-hop headers and those the Connection header names are not passed on', () => {
  const r = read('HTTP/1.1 200 OK\r\nConnection: x-a, keep-alive\r\nX-A: 1\r\nKeep-Alive: timeout=5\r\nUpgrade: h2c\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n');
  assert.equal(r.head?.headers, ['X-B', '2', 'Content-Length', '0']);
  assert.is(r.ended, true);
});

test('reader: interim 100 and 103 answers are skipped; the final one is read', () => {
  const r = read('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok');
  assert.is(r.head?.status, 201);
  assert.is(r.body, 'ok');
  assert.is(r.ended, true);
});

test('reader: without a length the body runs to the close, and the connection is not reused', () => {
  const r = read('HTTP/1.1 200 OK\r\n\r\nuntil the end', { eof: true });
  assert.is(r.body, 'until the end');
  assert.is(r.ended, false);
});

test('reader: HEAD, 204 and 304 answers have no body; HTTP/1.0 and Connection: close are not reused', () => {
  const head = read('HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n', { head: true });
  assert.is(head.ended, true);
  assert.equal(values(head.head, 'content-length'), ['99']);
  assert.is(read('HTTP/1.1 204 No Content\r\n\r\n').ended, true);
  assert.is(read('HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n').ended, true);
  assert.is(read('HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx').ended, false);
  assert.is(read('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx').ended, true);
  assert.is(read('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx').ended, false);
});

test('reader: bytes after a complete answer make the connection unusable', () => {
  const r = read('HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n\r\n', { chunkSize: 1000 });
  assert.is(r.body, 'x');
  assert.is(r.ended, false);
});

test('reader: Content-Length with Transfer-Encoding is read as chunked and never reused', () => {
  const r = read('HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n');
  assert.is(r.body, 'ok');
  assert.is(r.ended, false);
  assert.equal(values(r.head, 'content-length'), []);
});

test('reader: conflicting lengths, unknown codings, folded or nameless headers, bad chunks and huge heads are refused', () => {
  refuses('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok', /Content-Length/);
  refuses('HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n', /Content-Length/);
  refuses('HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n', /Content-Length/);
  refuses('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n', /Transfer-Encoding/);
  refuses('HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n', /header/);
  refuses('HTTP/1.1 200 OK\r\n: nameless\r\n\r\n', /header/);
  refuses('HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n', /header name/);
  refuses('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', /chunk size/);
  refuses('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX', /CRLF/);
  refuses('HTTP/1.1 200 OK\r\nX: ' + 'a'.repeat(70 * 1024), /too large/);
  refuses('HTTP/1.1 101 Switching Protocols\r\n\r\n', /101/);
  refuses('HTTP/2 200\r\n\r\n', /status line/);
  refuses('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort', /cut short/, { eof: true });
});

test('reader: repeated headers (set-cookie too) are passed on as sent; single-value ones keep the first', () => {
  const r = read(
    'HTTP/1.1 200 OK\r\nVary: a\r\nVary: b\r\nSet-Cookie: x=1\r\nSet-Cookie: y=2\r\nContent-Type: text/a\r\nContent-Type: text/b\r\nContent-Length: 0\r\n\r\n',
  );
  assert.equal(values(r.head, 'vary'), ['a', 'b']);
  assert.equal(values(r.head, 'set-cookie'), ['x=1', 'y=2']);
  assert.equal(values(r.head, 'content-type'), ['text/a']);
});

// --- through a real edge -----------------------------------------------------------------------

const top = mkdtempSync(join(tmpdir(), 'rbx-http1-'));
const rootfs = join(top, 'rootfs');
const servers: NetServer[] = [];
const sockets = new Set<Socket>();
/** Per upstream: connections that carried a request (readiness probes connect and carry none). */
const stats: Record<string, { connections: number; requests: string[]; open: number; maxOpen: number }> = {};
const egress = new Map<string, number>();
let edge: TestEdge;

/** A raw upstream: `answer` gets each request head (and body) and writes what it likes. */
async function upstream(name: string, answer: (s: Socket, req: string) => void): Promise<Site> {
  const st = (stats[name] = { connections: 0, requests: [] as string[], open: 0, maxOpen: 0 });
  const srv = createNetServer((s) => {
    sockets.add(s);
    let used = false;
    st.maxOpen = Math.max(st.maxOpen, ++st.open);
    s.on('close', () => st.open--);
    s.on('error', () => {});
    let buf = '';
    s.on('data', (d) => {
      buf += d.toString('latin1');
      // one request per head; bodies are handled by the answers that expect them
      while (buf.includes('\r\n\r\n')) {
        const end = buf.indexOf('\r\n\r\n') + 4;
        const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        const chunked = /transfer-encoding: chunked/i.test(buf.slice(0, end));
        const bodyEnd = chunked ? buf.indexOf('0\r\n\r\n', end) + 5 : end + len;
        if (chunked ? bodyEnd < 5 : buf.length < bodyEnd) return;
        const req = buf.slice(0, bodyEnd);
        buf = buf.slice(bodyEnd);
        st.requests.push(req);
        if (!used) st.connections++;
        used = true;
        answer(s, req);
      }
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  servers.push(srv);
  return {
    id: `srv_${name}`,
    slug: name,
    rootfs,
    upstream: { host: '127.0.0.1', port: (srv.address() as AddressInfo).port },
    neverSleep: false,
    suspended: false,
  };
}

const ok = (body: string, extra = '') => `HTTP/1.1 200 OK\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

test.before(async () => {
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  const list = [
    await upstream('keep', (s) => s.write(ok('kept'))),
    // answers, then closes the idle connection a moment later without saying so
    await upstream('stale', (s) => {
      s.write(ok('fresh'));
      setTimeout(() => s.destroy(), 30);
    }),
    await upstream('echo', (s, req) => s.write(ok(JSON.stringify(req)))),
    await upstream('dribble', (s) => {
      const bytes = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n';
      let i = 0;
      const t = setInterval(() => (i < bytes.length && !s.destroyed ? s.write(bytes[i++]) : clearInterval(t)), 1);
    }),
    await upstream('slow', (s) => setTimeout(() => s.write(ok('slow')), 40)),
    await upstream('ownid', (s) => s.write(ok('mine', 'X-Request-Id: app-chosen\r\n'))),
    await upstream('endless', (s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n');
      const t = setInterval(() => (s.destroyed ? clearInterval(t) : s.write(Buffer.alloc(16384, 1))), 5);
    }),
  ];
  edge = await startEdge({ sites: sitesOf(list), cfg: testConfig({ maxSocketsPerServer: 2 }), egress: (id, n) => egress.set(id, (egress.get(id) ?? 0) + n) });
});

test.after(async () => {
  await edge?.stop();
  for (const s of sockets) s.destroy();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  rmSync(top, { recursive: true, force: true });
});

const host = (name: string) => `${name}.${DOMAIN}`;

test('sequential requests reuse one kept-alive connection to the app', async () => {
  for (let i = 0; i < 5; i++) assert.is((await get(edge.http, host('keep'), `/${i}`)).text, 'kept');
  assert.is(stats.keep.requests.length, 5);
  assert.is(stats.keep.connections, 1);
});

test('a kept-alive connection the app closed is retried once on a fresh one (GET)', async () => {
  assert.is((await get(edge.http, host('stale'), '/a')).text, 'fresh');
  await new Promise((r) => setTimeout(r, 100));
  assert.is((await get(edge.http, host('stale'), '/b')).text, 'fresh');
  assert.is(stats.stale.connections, 2);
});

test('a chunked request body reaches the app re-chunked, with our headers and no hop-by-hop ones', async () => {
  const body = await new Promise<string>((resolve, reject) => {
    const r = request(
      {
        host: '127.0.0.1',
        port: edge.http,
        path: '/up',
        method: 'POST',
        headers: { host: host('echo'), 'transfer-encoding': 'chunked', connection: 'keep-alive, x-gone', 'x-gone': '1', expect: '100-continue' },
        agent: false,
      },
      (res) => {
        let b = '';
        res.on('data', (c) => (b += c));
        res.on('end', () => resolve(b));
      },
    );
    r.on('error', reject);
    r.on('continue', () => {
      r.write('first ');
      r.end('second');
    });
  });
  const req = JSON.parse(body) as string;
  assert.match(req, /^POST \/up HTTP\/1\.1\r\n/);
  assert.match(req, /\r\ntransfer-encoding: chunked\r\n/);
  assert.match(req, /\r\nx-forwarded-for: 127\.0\.0\.1\r\n/);
  assert.not.match(req, /x-gone|expect/i);
  const payload = req.slice(req.indexOf('\r\n\r\n') + 4);
  const decoded = payload
    .split('\r\n')
    .filter((_, i) => i % 2 === 1)
    .join('');
  assert.is(decoded, 'first second');
});

test('an answer dribbled a byte at a time arrives whole', async () => {
  const r = await get(edge.http, host('dribble'), '/');
  assert.is(r.status, 200);
  assert.is(r.text, 'abcdef');
});

test('at most maxSocketsPerServer connections per app; the requests beyond wait their turn', async () => {
  const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => get(edge.http, host('slow'), `/${i}`)));
  assert.ok(answers.every((a) => a.text === 'slow'));
  assert.ok(stats.slow.maxOpen <= 2, `app saw ${stats.slow.maxOpen} connections at once`);
});

test('a client leaving mid-answer closes that upstream connection; the next request gets a new one', async () => {
  await new Promise<void>((resolve) => {
    const r = request({ host: '127.0.0.1', port: edge.http, path: '/', headers: { host: host('endless') }, agent: false }, (res) => {
      res.once('data', () => {
        r.destroy();
        resolve();
      });
    });
    r.on('error', () => {});
    r.end();
  });
  for (let i = 0; i < 50 && stats.endless.open > 0; i++) await new Promise((r) => setTimeout(r, 20));
  assert.is(stats.endless.open, 0);
  assert.is((await get(edge.http, host('keep'), '/')).text, 'kept');
});

test('header bytes beyond ASCII (obs-text) reach the app as the client sent them', async () => {
  const got = await new Promise<Buffer>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: edge.http });
    const chunks: Buffer[] = [];
    s.on('data', (d) => chunks.push(d));
    s.on('error', reject);
    s.on('close', () => resolve(Buffer.concat(chunks)));
    s.write(Buffer.from(`GET /latin HTTP/1.1\r\nHost: ${host('echo')}\r\nX-Name: caf\xe9\r\nConnection: close\r\n\r\n`, 'latin1'));
  });
  // the echo app decodes what it received as latin1 and answers in UTF-8
  const body = JSON.parse(got.subarray(got.indexOf('\r\n\r\n') + 4).toString('utf8')) as string;
  assert.ok(body.includes('\r\nX-Name: caf\xe9\r\n'), body); // one byte 0xE9, not UTF-8's two
});

test('a burst of answers that each arrive in one read reach their own clients, with their own request ids', async () => {
  const ids = Array.from({ length: 40 }, (_, i) => `burst-${String(i).padStart(4, '0')}`);
  const rs = await Promise.all(ids.map((id, i) => get(edge.http, host('echo'), `/burst/${i}`, { headers: { 'x-request-id': id } })));
  rs.forEach((r, i) => {
    assert.is(r.status, 200);
    assert.ok(JSON.parse(r.text).startsWith(`GET /burst/${i} HTTP/1.1\r\n`), r.text.slice(0, 80));
    assert.is(r.headers['x-request-id'], ids[i]);
  });
  // the cap of 2 connections held: the burst queued and was carried over at most two
  assert.ok(stats.echo.maxOpen <= 2, `open ${stats.echo.maxOpen}`);
});

test("answers carry our request id, or the app's own when it sets one (never both)", async () => {
  const ours = await get(edge.http, host('keep'), '/', { headers: { 'x-request-id': 'client-given-1' } });
  assert.is(ours.headers['x-request-id'], 'client-given-1');
  const theirs = await get(edge.http, host('ownid'), '/');
  assert.is(theirs.headers['x-request-id'], 'app-chosen');
});

test('bytes sent for a server are reported as its egress', async () => {
  egress.clear();
  for (let i = 0; i < 3; i++) await get(edge.http, host('keep'), '/');
  const n = egress.get('srv_keep') ?? 0;
  // three 4-byte bodies and their heads, as written to the client
  assert.ok(n >= 3 * 4 && n < 3 * 200, `egress ${n}`);
});

test.run();
