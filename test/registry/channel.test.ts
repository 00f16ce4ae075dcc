// Two (and for the loop, three) daemons on one machine sharing a real PostgreSQL registry, each
// with its own ports, data dir and channel listener: a server created on A answers through B's
// HTTP and HTTPS edge (static page and app, byte-exact both ways, a 50 MB upload, a WebSocket
// echo) over the mutual-TLS channel, its egress counted once, on A; a stale route costs one retry
// and reaches the right server; an advertise address leading back to the sender ends in 502
// forward_loop; the channel refuses clients without a certificate of the cluster CA; and a host
// whose channel is gone, or whose lease ended, answers through B with a fast 503 host_unavailable.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // servers are plain processes...
process.env.ROOTBOX_TEST_PROCESS_APPS = '1'; // ...whose apps listen on port 80 of an address of their own
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { request as h1, type IncomingHttpHeaders } from 'node:http';
import { connect as h2connect } from 'node:http2';
import { request as tlsRequest } from 'node:https';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import WebSocket from 'ws';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { issueIdentity } from '../../src/channel/index.js';
import { loadConfig } from '../../src/config/index.js';
import { createCa, issueLeaf, loadCa } from '../../src/edge/index.js';
import { RegistryCa, RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { registerMember, TEST_CLUSTER_TOKEN, testKeys } from '../helpers/cluster.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let c: TestDaemon | undefined;
const channelPort = { a: 0, b: 0 };
/** Egress each daemon's billing was told, by server. */
const egress = new Map<TestDaemon, Map<string, number>>();

const opts = (host: string, listen: number, advertise = listen) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, listen: `127.0.0.1:${listen}`, advertise: `127.0.0.1:${advertise}`, lease: '3s', connectTimeout: '500ms' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
});
let creates = 0;
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}) =>
  send(d.http, 'api.localhost', method, path, {
    body: o.body,
    headers: o.key ? { authorization: `Bearer ${o.key}` } : {},
    // each create from an address of its own: anonymous accounts are limited per address
    from: method === 'POST' ? `127.0.9.${++creates}` : undefined,
  });

function watchEgress(d: TestDaemon): void {
  const seen = new Map<string, number>();
  egress.set(d, seen);
  const meter = d.daemon.billing.meter;
  const add = meter.addEgress.bind(meter);
  meter.addEgress = (id, n) => {
    seen.set(id, (seen.get(id) ?? 0) + n);
    add(id, n);
  };
}
const egressOf = (d: TestDaemon, id: string) => egress.get(d)?.get(id) ?? 0;

async function create(d: TestDaemon, slug: string, files: Record<string, Buffer | string>, app = false): Promise<{ id: string; api_key: string }> {
  const r = await api(d, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  const root = join(d.daemon.runtime.get(r.json.id)!.rootfs, 'root');
  for (const [name, body] of Object.entries(files)) {
    mkdirSync(join(root, name, '..'), { recursive: true });
    writeFileSync(join(root, name), body);
  }
  if (app) {
    writeFileSync(join(root, 'run.sh'), '#!/bin/sh\n');
    chmodSync(join(root, 'run.sh'), 0o755);
  }
  return r.json;
}

interface Got {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  ms: number;
}

/** One request over HTTP/1.1, plain or TLS (the daemon's local CA), to a daemon's edge. */
function get(
  d: TestDaemon,
  host: string,
  path: string,
  o: { tls?: boolean; method?: string; body?: Buffer; headers?: Record<string, string> } = {},
): Promise<Got> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const common = {
      host: '127.0.0.1',
      method: o.method ?? 'GET',
      path,
      agent: false as const,
      headers: { host, accept: 'application/json', ...(o.body ? { 'content-length': String(o.body.length) } : {}), ...o.headers },
    };
    const done = (res: import('node:http').IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (x: Buffer) => chunks.push(x));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks), ms: performance.now() - t0 }));
      res.on('error', reject);
    };
    const req = o.tls ? tlsRequest({ ...common, port: d.https, ca: d.ca, servername: host }, done) : h1({ ...common, port: d.http }, done);
    req.on('error', reject);
    req.end(o.body);
  });
}

/** One request over HTTP/2 (TLS) to a daemon's edge. */
function getH2(d: TestDaemon, host: string, path: string, body?: Buffer): Promise<Got> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const s = h2connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: host });
    s.on('error', reject);
    const req = s.request({ ':method': body ? 'POST' : 'GET', ':path': path, ':authority': host, accept: 'application/json' }, { endStream: !body });
    let headers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => (headers = h as IncomingHttpHeaders));
    req.on('data', (x: Buffer) => chunks.push(x));
    req.on('end', () => {
      s.close();
      resolve({ status: Number(headers[':status']), headers, body: Buffer.concat(chunks), ms: performance.now() - t0 });
    });
    req.on('error', reject);
    if (body) req.end(body);
  });
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

test.before(async () => {
  pg = await startPostgres();
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN } } });
  const out: string[] = [];
  const io = { out: (s: string) => out.push(s), err: (s: string) => out.push(s) };
  assert.is(await clusterCommand(cfg, 'init', {}, io), 0, out.join('\n'));
  assert.match(out.join('\n'), /cluster CA created/);
  channelPort.a = await freePort();
  channelPort.b = await freePort();
  a = await startTestDaemon(opts('host-a', channelPort.a));
  b = await startTestDaemon(opts('host-b', channelPort.b));
  watchEgress(a);
  watchEgress(b);
});
test.after(async () => {
  await c?.stop();
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

const page = randomBytes(300_000);

test("a static page of A's server answers through B's HTTP and HTTPS edge byte for byte, its egress counted once, on A", async () => {
  const srv = await create(a, 'pages', { 'www/index.html': '<h1>from A</h1>', 'www/blob.bin': page });
  assert.is(b.daemon.runtime.get(srv.id), undefined, 'the server runs on A only');
  const plain = await get(b, 'pages.localhost', '/');
  assert.is(plain.status, 200, plain.body.toString());
  assert.is(plain.body.toString(), '<h1>from A</h1>');
  for (const via of [
    () => get(b, 'pages.localhost', '/blob.bin'),
    () => get(b, 'pages.localhost', '/blob.bin', { tls: true }),
    () => getH2(b, 'pages.localhost', '/blob.bin'),
  ]) {
    const before = egressOf(a, srv.id);
    const r = await via();
    assert.is(r.status, 200);
    assert.ok(r.body.equals(page), 'the same bytes as on A');
    // what A's edge sent on the channel: the body (HTTP/2 DATA), counted when the stream closed
    await until('A counts the answer', () => egressOf(a, srv.id) - before >= page.length, 5000);
    assert.is(egressOf(a, srv.id) - before, page.length);
  }
  assert.is(egressOf(b, srv.id), 0, 'B bills nothing for a server it does not run');
  // the request id the client chose is the one A answered with
  const rid = await get(b, 'pages.localhost', '/', { headers: { 'x-request-id': 'client-chosen-id-1' } });
  assert.is(rid.headers['x-request-id'], 'client-chosen-id-1');
});

test("A's app answers through B: the client's address reaches it, bodies both ways byte for byte, a 50 MB upload, a WebSocket echo", async () => {
  const srv = await create(a, 'appy', {}, true);
  const hello = await until('the app answers through B', async () => {
    const r = await get(b, 'appy.localhost', '/hello', { tls: true });
    return r.status === 200 ? r : undefined;
  });
  const j = JSON.parse(hello.body.toString()) as { url: string; forwardedFor: string };
  assert.is(j.url, '/hello');
  assert.is(j.forwardedFor, '127.0.0.1', "the client's address as B saw it, not a header the client sent");
  const spoof = JSON.parse(
    (await get(b, 'appy.localhost', '/', { headers: { 'x-forwarded-for': '6.6.6.6', 'x-rootbox-client-ip': '6.6.6.6' } })).body.toString(),
  );
  assert.is(spoof.forwardedFor, '127.0.0.1');
  // the channel's own headers (client address, server, epoch, hops) end on A: the app never sees them
  for (const via of [
    () => get(b, 'appy.localhost', '/seen'),
    () => get(b, 'appy.localhost', '/seen', { method: 'POST', body: Buffer.from('x'), tls: true }),
    () => getH2(b, 'appy.localhost', '/seen', Buffer.from('x')),
  ]) {
    const r = await via();
    assert.is(r.status, 200, r.body.toString());
    assert.equal(JSON.parse(r.body.toString()).internal, [], 'no x-rootbox-* header reaches the app');
  }

  const body = randomBytes(700_000);
  for (const via of [
    () => get(b, 'appy.localhost', '/echo', { method: 'POST', body }),
    () => get(b, 'appy.localhost', '/echo', { method: 'POST', body, tls: true }),
    () => getH2(b, 'appy.localhost', '/echo', body),
  ]) {
    const r = await via();
    assert.is(r.status, 200);
    assert.ok(r.body.equals(body), 'the echo is the bytes sent');
  }

  const big = randomBytes(50 * 1024 * 1024);
  const up = await get(b, 'appy.localhost', '/upload', { method: 'POST', body: big, tls: true });
  assert.is(up.status, 200, up.body.toString());
  const got = JSON.parse(up.body.toString()) as { bodyLength: number; sha256: string };
  assert.is(got.bodyLength, big.length);
  assert.is(got.sha256, sha(big));

  const ws = new WebSocket(`ws://127.0.0.1:${b.http}/ws`, { headers: { host: 'appy.localhost' } });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const echoed: Buffer[] = [];
  ws.on('message', (m: Buffer) => echoed.push(Buffer.from(m)));
  const frames = [randomBytes(10), randomBytes(200_000), Buffer.from('last')];
  for (const f of frames) ws.send(f);
  await until('every frame comes back', () => echoed.length === frames.length, 10_000);
  frames.forEach((f, i) => assert.ok(echoed[i].equals(f)));
  const before = egressOf(a, srv.id);
  ws.close();
  await until('A counts the WebSocket', () => egressOf(a, srv.id) > before, 5000);
  assert.is(egressOf(b, srv.id), 0);
});

test('a stale route costs one retry and reaches the server that holds the slug now, body included', async () => {
  const old = await create(a, 'moving', { 'www/index.html': 'old' });
  assert.is((await get(b, 'moving.localhost', '/')).body.toString(), 'old'); // B now remembers moving → old server on A
  assert.is((await api(a, 'DELETE', `/servers/${old.id}`, { key: old.api_key })).status, 200);
  await create(a, 'moving', {}, true);
  const body = randomBytes(100_000);
  const r = await until('the new app answers', async () => {
    const x = await get(b, 'moving.localhost', '/up', { method: 'POST', body });
    return x.status === 200 ? x : undefined;
  });
  assert.is(JSON.parse(r.body.toString()).sha256, sha(body), 'the buffered body was sent again whole');
});

test("the channel refuses a client without a certificate of the cluster CA (none, self-signed, or from another CA) and one of the CA that is not a registered host's registered key", async () => {
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  const pair = (await new RegistryCa(pool, testKeys()).load())!;
  await pool.end();
  const ask = (cert?: { cert: string; key: string }) =>
    new Promise<number | string>((resolve) => {
      const s = h2connect(`https://127.0.0.1:${channelPort.a}`, { ca: pair.certPem, servername: 'host-a', ...cert });
      s.on('error', (e: Error & { code?: string }) => resolve(e.code ?? e.message));
      s.on('close', () => resolve('closed'));
      const req = s.request({
        ':path': '/',
        ':authority': 'pages.localhost',
        'x-rootbox-site': 'pages.localhost',
        'x-rootbox-server': 'srv_x',
        'x-rootbox-hops': '1',
      });
      req.on('response', (h) => {
        resolve(Number(h[':status']));
        s.close();
      });
      req.on('error', (e: Error & { code?: string }) => resolve(e.code ?? e.message));
      req.on('close', () => resolve('closed'));
      req.end();
    });
  const member = issueIdentity(pair, 'host-x');
  assert.type(await ask({ cert: member.cert, key: member.key }), 'string', 'a certificate of the CA for a name the registry does not know: refused');
  await registerMember(pg, member);
  assert.is(await ask({ cert: member.cert, key: member.key }), 421, 'a registered member is heard (and told the server is not here)');
  const otherKey = issueIdentity(pair, 'host-x');
  assert.type(await ask({ cert: otherKey.cert, key: otherKey.key }), 'string', 'the CA signed it, but its key is not the one host-x registered: refused');
  const impostor = issueIdentity(pair, 'host-b');
  assert.type(await ask({ cert: impostor.cert, key: impostor.key }), 'string', "a live host's name with another key: refused");
  assert.type(await ask(), 'string', 'no certificate: refused');
  const self = createCa('host-x');
  assert.type(await ask({ cert: self.certPem, key: self.keyPem }), 'string', 'a self-signed certificate: refused');
  const other = createCa('rootbox cluster CA');
  const forged = issueLeaf(loadCa(other.certPem, other.keyPem, 'rootbox cluster CA'), ['host-b'], 1, true);
  assert.type(await ask({ cert: forged.certPem, key: forged.keyPem }), 'string', 'a certificate of another CA with the same name: refused');
});

test('an advertise address leading back to the sender ends at once in 502 forward_loop, not a storm', async () => {
  // host-c registers B's channel as its own (a misconfigured cluster.advertise)
  c = await startTestDaemon(opts('host-c', await freePort(), channelPort.b));
  await create(c, 'loopy', { 'www/index.html': 'never seen through B' });
  // B reads the hosts every second: until then host-c is unknown to it (503, down)
  const r = await until('B knows host-c', async () => {
    const x = await get(b, 'loopy.localhost', '/');
    return /is down/.test(x.body.toString()) ? undefined : x;
  });
  assert.is(r.status, 502, r.body.toString());
  assert.is(JSON.parse(r.body.toString()).error, 'forward_loop');
  assert.ok(r.ms < 2000, `${r.ms} ms`);
  assert.is(b.logs.filter((l) => l.msg === 'forwarding loop: the channel address of a host leads back here').length, 1);
});

test('a host whose channel is gone answers through B with a fast 503 host_unavailable; once its lease ends, the same without trying', async () => {
  await create(a, 'goner', { 'www/index.html': 'here' });
  assert.is((await get(b, 'goner.localhost', '/')).status, 200);
  await a.daemon.channel!.stop(); // A's listener and sessions gone; its lease still runs
  for (const accept of ['application/json', 'text/html']) {
    const r = await get(b, 'goner.localhost', '/', { headers: { accept } });
    assert.is(r.status, 503, r.body.toString());
    assert.ok(r.ms < 1000, `${r.ms} ms`);
    assert.ok(Number(r.headers['retry-after']) >= 1);
    if (accept === 'application/json') assert.is(JSON.parse(r.body.toString()).error, 'host_unavailable');
    else assert.match(r.body.toString(), /<html/i);
  }
  await a.stop(); // its lease ends now; its placement stays in the registry
  a = undefined as unknown as TestDaemon;
  await until('B sees A down', async () => /is down/.test((await get(b, 'goner.localhost', '/')).body.toString()), 5000);
  const r = await get(b, 'goner.localhost', '/');
  assert.is(r.status, 503);
  assert.ok(r.ms < 500, `${r.ms} ms`);
});

test.run();
