// One source cannot starve a server's other clients (issue 35 item 3): 300 stalled uploads from
// one address (HTTP/2 streams over TLS through the real edge) to one server's app. The upstream
// pool holds at most the source's share of the app's connections (proxy.maxSocketsPerSource) and
// queues as many; the rest get 429 with Retry-After at once; a GET from another address answers
// at once; the stalled bodies end with 408 after proxy.bodyIdleTimeout and the app's connections
// are freed. The app is a real node:http server on 127.0.0.1.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, chmodSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Site } from '../../src/proxy/index.js';
import { UpstreamPool, type Conn } from '../../src/proxy/pool.js';
import { sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from './helpers.js';
import { until } from '../helpers/wait.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-fair-'));
const rootfs = join(top, 'rootfs');
const UPLOADS = 300;
const SHARE = 64; // proxy.maxSocketsPerSource's default
const IDLE = 3000; // proxy.bodyIdleTimeout in this test
let edge: TestEdge;
let app: Server;
const at = { open: 0, uploads: 0 };

interface Answer {
  status: number;
  error?: string;
  retryAfter?: string;
  at: number;
}

test.before(async () => {
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\nexec true\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  app = createServer((req, res) => {
    if (req.url === '/upload') {
      at.uploads++;
      req.resume();
      req.on('end', () => res.end('stored'));
    } else res.end('hello from the app');
  });
  app.on('connection', (s) => {
    at.open++;
    s.on('close', () => at.open--);
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const site: Site = {
    id: 'srv_fair',
    slug: 'fair',
    rootfs,
    upstream: { host: '127.0.0.1', port: (app.address() as AddressInfo).port },
    neverSleep: false,
    suspended: false,
  };
  edge = await startEdge({ sites: sitesOf([site]), cfg: testConfig({ bodyIdleTimeout: `${IDLE}ms` }) });
});

test.after(async () => {
  await edge?.stop();
  app?.closeAllConnections();
  await new Promise((r) => app?.close(r));
  rmSync(top, { recursive: true, force: true });
});

/** A plain HTTP/1.1 GET through the edge from `localAddress`, failing after `ms`. */
function getFrom(localAddress: string, ms: number): Promise<{ status: number; body: string; retryAfter?: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', localAddress, port: edge.http, path: '/', headers: { host: `fair.${DOMAIN}` }, agent: false }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, retryAfter: res.headers['retry-after'], ms: performance.now() - t0 }));
    });
    r.setTimeout(ms, () => r.destroy(new Error(`GET from ${localAddress} got no answer within ${ms} ms`)));
    r.on('error', reject);
    r.end();
  });
}

test('300 stalled uploads from one address: another address still gets the app; the stalled ones end 429 or 408', async () => {
  const sessions: ClientHttp2Session[] = [];
  const answers: Answer[] = [];
  const t0 = Date.now();
  // the edge allows 128 streams per HTTP/2 session: 3 sessions of 100 stalled uploads each
  for (let s = 0; s < 3; s++) {
    const session = h2connect(`https://fair.${DOMAIN}:${edge.https}`, {
      ca: readFileSync(edge.caFile),
      lookup: (_h, o, cb) => (cb as any)(null, o.all ? [{ address: '127.0.0.1', family: 4 }] : '127.0.0.1', 4),
    });
    session.on('error', () => {});
    sessions.push(session);
    for (let i = 0; i < UPLOADS / 3; i++) {
      const st = session.request({ ':method': 'POST', ':path': '/upload', 'content-length': '1000000' });
      st.write(Buffer.alloc(1024, 1)); // and then nothing more: a stalled body
      let head: Record<string, unknown> = {};
      let body = '';
      st.on('response', (h) => (head = h));

      st.on('data', (c) => (body += c));
      st.on('error', () => {});
      st.on('close', () => {
        let error: string | undefined;
        try {
          error = (JSON.parse(body) as { error?: string }).error;
        } catch {}
        answers.push({ status: Number(head[':status'] ?? 0), error, retryAfter: head['retry-after'] as string | undefined, at: Date.now() - t0 });
      });
    }
  }
  try {
    // every upload reached the app or was answered (today: 256 reach it, the pool's cap, 44 wait)
    await until('the uploads to reach the app or be refused', () => at.uploads + answers.length >= UPLOADS - SHARE, 20_000);

    // another address: answered at once, while the stalled uploads still hold their connections
    const other = await getFrom('127.0.0.2', 2000);
    assert.is(other.status, 200);
    assert.is(other.body, 'hello from the app');
    assert.ok(other.ms < 2000, `the GET took ${other.ms} ms`);
    assert.ok(at.uploads <= SHARE, `one address holds at most its share of the app's connections (${at.uploads} reached the app)`);
    // the same address: at its share with as many waiting, a clear 429 at once
    const same = await getFrom('127.0.0.1', 2000);
    assert.is(same.status, 429);
    assert.ok(same.body.includes('too_many_app_requests'), same.body);
    assert.is(same.retryAfter, '1');

    const refused = answers.filter((a) => a.status === 429);
    assert.is(refused.length, UPLOADS - 2 * SHARE, 'the uploads beyond the share and its queue are refused at once');
    for (const a of refused) {
      assert.is(a.error, 'too_many_app_requests');
      assert.is(a.retryAfter, '1');
    }

    // a stalled HTTP/1.1 upload from a third address: 408 after the idle timeout, its connection closed
    const h1 = new Promise<string>((resolve) => {
      const s = connect({ host: '127.0.0.1', localAddress: '127.0.0.3', port: edge.http });
      let out = '';
      s.on('data', (d) => (out += d.toString('latin1')));
      s.on('error', () => {});
      s.on('close', () => resolve(out));
      s.write(`POST /upload HTTP/1.1\r\nhost: fair.${DOMAIN}\r\ncontent-length: 100000\r\n\r\n`);
      s.write(Buffer.alloc(1024, 2));
    });

    // past bodyIdleTimeout the stalled ones end with 408, then the queued ones get the app and stall in turn
    await until('every stalled upload to be answered', () => answers.length >= UPLOADS, 4 * IDLE + 10_000);
    const stalled = answers.filter((a) => a.status === 408);
    assert.is(stalled.length, 2 * SHARE, `statuses: ${JSON.stringify(answers.filter((a) => a.status !== 429 && a.status !== 408).slice(0, 3))}`);
    for (const a of stalled) {
      assert.is(a.error, 'body_timeout');
      assert.ok(a.at >= IDLE - 100, `a stalled upload ended after ${a.at} ms`);
    }
    const h1answer = await h1;
    assert.match(h1answer, /^HTTP\/1\.1 408 /);
    assert.match(h1answer, /\r\nconnection: close\r\n/i);
    assert.match(h1answer, /body_timeout/);
    // their connections to the app are freed
    await until("the stalled uploads' app connections to close", () => at.open <= 2, 5000);
    const after = await getFrom('127.0.0.1', 2000);
    assert.is(after.status, 200);
  } finally {
    for (const s of sessions) s.destroy();
  }
});

test('the pool: a source at its share waits for its own connections, a bounded number of its requests wait, others get in', async () => {
  const pool = new UpstreamPool({ maxSockets: 4, maxPerSource: 2, connectTimeout: 2000, activeTimeout: 10_000, idleTimeout: 4000 });
  const up = { host: '127.0.0.1', port: (app.address() as AddressInfo).port };
  const got: Record<string, Conn[]> = { a: [], b: [] };
  const take = (who: 'a' | 'b') => pool.acquire(up, false, who, (c) => got[who].push(c));
  try {
    assert.type(take('a'), 'function');
    assert.type(take('a'), 'function');
    assert.is(got.a.length, 2);
    const waitA1 = take('a'); // at its share: waits, though the pool has room
    assert.type(waitA1, 'function');
    assert.type(take('a'), 'function');
    assert.is(got.a.length, 2);
    assert.is(take('a'), 'share', 'with its share held and as many waiting, a third waiter is refused');
    take('b');
    assert.is(got.b.length, 1, 'another source gets a connection at once');
    (waitA1 as () => void)(); // a waiter gives up: its place in the bound is free again
    assert.type(take('a'), 'function');
    assert.is(take('a'), 'share');
    pool.release(got.a[0], true); // a's own connection freed: its oldest waiter gets it
    assert.is(got.a.length, 3);
    assert.is(got.a[2], got.a[0]);
    pool.release(got.b[0], true); // b's: a is still at its share, so it is kept free
    assert.is(got.a.length, 3);
    take('b');
    assert.is(got.b[1], got.b[0], 'b takes its kept-alive connection back');
  } finally {
    pool.close();
    for (const c of [...got.a, ...got.b]) c.sock.destroy();
  }
});

test('the pool: a full queue gives the newcomer the place of the oldest waiter of the source waiting most, else refuses', async () => {
  const pool = new UpstreamPool({ maxSockets: 2, maxPerSource: 2, maxWaiting: 2, connectTimeout: 2000, activeTimeout: 10_000, idleTimeout: 4000 });
  const up = { host: '127.0.0.1', port: (app.address() as AddressInfo).port };
  const conns: Conn[] = [];
  const bumped: string[] = [];
  const take = (who: string) => pool.acquire(up, false, who, (c) => conns.push(c), { bumped: () => bumped.push(who) });
  try {
    take('a');
    take('a');
    assert.is(conns.length, 2);
    assert.type(take('a'), 'function');
    assert.type(take('a'), 'function'); // the queue (maxWaiting) is full, of a's
    assert.type(take('b'), 'function', 'b waits in the place of one of a');
    assert.equal(bumped, ['a']);
    assert.is(take('c'), 'full', 'a and b wait one each: nobody gives c a place');
    assert.equal(bumped, ['a']);
  } finally {
    pool.close();
    for (const c of conns) c.sock.destroy();
  }
});

test.run();
