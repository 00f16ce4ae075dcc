// The lane (src/edge/lane.ts) seen from outside is node's server: a real Edge and proxy with the
// lane on, and one with it off, in front of one node:http app on 127.0.0.1, get the same bytes and
// must answer alike where the lane once differed — a head with bare LF line ends (node: 400 at
// once), bytes after `Connection: close` (node refuses them), an idle connection (closed at the
// keep-alive timeout, not the head deadline), a cut answer (counted in
// rootbox_http_requests_total). Last, a lane request whose forward throws after the presence hold
// (a Forwarder that fails, injected into a real ProxyApp) still gets an answer, gives the hold
// back and leaves the connection under the guard's deadline again.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Edge, TlsManager } from '../../src/edge/index.js';
import { createLogger } from '../../src/log/index.js';
import { registry } from '../../src/metrics/registry.js';
import { IdleTracker } from '../../src/presence/index.js';
import { ProxyApp } from '../../src/proxy/app.js';
import { Forwarder } from '../../src/proxy/forward.js';
import { Publication } from '../../src/proxy/publish.js';
import type { Site } from '../../src/proxy/sites.js';
import { parseExposition, sampleValue } from '../helpers/prom.js';
import { until } from '../helpers/wait.js';
import { runningRuntime, sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from '../proxy/helpers.js';
import { exchange } from './clients.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-lane-parity-'));
let app: Server;
let site: Site;
let lane: TestEdge;
let full: TestEdge;
const KEEP_ALIVE = 400;

const get = (path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: app.${DOMAIN}\r\n${extra}\r\n`;
/** node's server says how long it keeps a connection; the lane does not (how its answers are told apart). */
const laneAnswered = (a: { headers: Record<string, string> }) => a.headers['keep-alive'] === undefined;
const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));

test.before(async () => {
  mkdirSync(join(top, 'app/root'), { recursive: true });
  writeFileSync(join(top, 'app/root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(top, 'app/root/run.sh'), 0o755);
  app = createServer((req, res) => {
    if (req.url === '/cut') {
      // a head promising 100 bytes, 10 of them, then the app's connection is gone
      res.writeHead(200, { 'content-length': 100 });
      res.write('0123456789');
      return void setTimeout(() => res.socket?.destroy(), 20);
    }
    res.writeHead(200, { 'content-length': 5 }).end('hello');
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  site = {
    id: 'srv_app',
    slug: 'app',
    rootfs: join(top, 'app'),
    upstream: { host: '127.0.0.1', port: (app.address() as AddressInfo).port },
    neverSleep: false,
    suspended: false,
  };
  // the head deadline is long: an idle connection must close at the keep-alive timeout
  lane = await startEdge({ sites: sitesOf([site]), keepAliveTimeout: KEEP_ALIVE, headerTimeout: 30_000 });
  full = await startEdge({ sites: sitesOf([site]), cfg: testConfig({ lane: 'off' }), keepAliveTimeout: KEEP_ALIVE, headerTimeout: 30_000 });
  // the first request to a server goes the full way (its app is not yet known to be up)
  for (const e of [lane, full]) await exchange(e.http, get('/', 'Connection: close\r\n'));
});

test.after(async () => {
  await lane?.stop();
  await full?.stop();
  await new Promise((r) => app?.close(r));
  rmSync(top, { recursive: true, force: true });
});

test('a head with bare LF line ends is refused at once as node refuses it (400, or 505 for the request line), not left to the head deadline', async () => {
  for (const head of [`GET / HTTP/1.1\nHost: app.${DOMAIN}\n\n`, `GET / HTTP/1.1\r\nHost: app.${DOMAIN}\nX-A: 1\r\n\r\n`]) {
    const byNode = await exchange(full.http, head, { timeoutMs: 3000 });
    const byLane = await exchange(lane.http, head, { timeoutMs: 3000 });
    assert.ok(byNode.status >= 400, byNode.text);
    assert.is(byLane.status, byNode.status, JSON.stringify(byLane.text));
    assert.is(JSON.parse(byLane.body).error, JSON.parse(byNode.body).error);
    assert.ok(byLane.closed && byLane.closedAfter < 1000, `answered and closed after ${byLane.closedAfter} ms`);
  }
});

test('bytes after a request that asks to close are refused as node refuses them', async () => {
  const bytes = get('/', 'Connection: close\r\n') + get('/');
  const byNode = await exchange(full.http, bytes, { timeoutMs: 3000 });
  const byLane = await exchange(lane.http, bytes, { timeoutMs: 3000 });
  assert.equal(statuses(byLane.text), statuses(byNode.text), `lane: ${JSON.stringify(byLane.text)}\nnode: ${JSON.stringify(byNode.text)}`);
  assert.ok(byLane.closed);
});

test("an idle connection after a lane answer is closed at node's keep-alive timeout, as node's server closes it", async () => {
  for (const [e, byLane] of [
    [lane, true],
    [full, false],
  ] as const) {
    const a = await exchange(e.http, get('/'), { timeoutMs: 5000 });
    assert.is(a.status, 200, a.text);
    assert.is(laneAnswered(a), byLane, a.text);
    assert.ok(a.closed, 'closed by the edge');
    assert.ok(a.closedAfter >= KEEP_ALIVE - 50 && a.closedAfter < KEEP_ALIVE + 2000, `closed after ${a.closedAfter} ms`);
  }
});

test('a lane answer cut short by the app is counted in rootbox_http_requests_total, as the full path counts it', async () => {
  for (const e of [lane, full]) {
    const count = async () => sampleValue(parseExposition(await registry.metrics()), 'rootbox_http_requests_total', { host: 'site', status: '200' });
    const before = await count();
    const a = await exchange(e.http, get('/cut'), { timeoutMs: 5000 });
    assert.is(a.status, 200);
    assert.ok(a.closed && a.body.length < 100, 'cut');
    await until(`${e === lane ? 'lane' : 'full path'}: the cut answer counted`, async () => (await count()) - before === 1, 3000);
  }
});

/** A forwarder whose lane forward fails (after the ProxyApp took the presence hold). */
class FailingForwarder extends Forwarder {
  override direct(): never {
    throw new Error('injected: the forward failed');
  }
}

test('a lane request that throws after the hold is answered, the hold is given back and the guard deadline is on again', async () => {
  const log = createLogger({ level: 'error', sink: () => {} });
  const cfg = testConfig();
  const sites = sitesOf([site]);
  const publication = new Publication({ checkInterval: cfg.publishCheckInterval });
  const presence = new IdleTracker({
    runtime: runningRuntime(sites),
    neverSleep: () => false,
    idleTimeout: cfg.idleTimeout,
    checkInterval: cfg.idleCheckInterval,
    log,
  });
  const forwarder = new FailingForwarder({ connectTimeout: cfg.connectTimeout, upstreamTimeout: cfg.upstreamTimeout, maxSockets: 8, log });
  const proxy = new ProxyApp({ sites, presence, publication, forwarder, cfg, log });
  const dataDir = mkdtempSync(join(top, 'tls-'));
  const tls = new TlsManager({ domain: DOMAIN, dataDir, log });
  const nope = { handle: () => undefined };
  const edge = new Edge({
    domain: DOMAIN,
    http: { host: '127.0.0.1', port: 0, redirect: false, headerTimeout: 300 },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: nope, verify: nope, proxy: { handle: proxy.handle.bind(proxy), lane: proxy.lane.bind(proxy) } },
  });
  await edge.start();
  try {
    // run.sh not yet looked at: the lane waits (hasApp, hold, ready), then the forward throws
    const a = await exchange(edge.ports.http, get('/'), { timeoutMs: 5000 });
    assert.is(a.status, 500, JSON.stringify(a.text));
    assert.is(JSON.parse(a.body).error, 'internal');
    assert.not.ok(presence.busy(site.id), 'the presence hold was given back');
    // kept alive, then closed by the guard's 300 ms head deadline: it was turned on again
    assert.ok(a.closed && a.closedAfter < 3000, `closed after ${a.closedAfter} ms`);
  } finally {
    await edge.stop(500);
    forwarder.close();
    tls.close();
  }
});

test.run();
