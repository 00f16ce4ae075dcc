// Placement across hosts (issue 29 item 5) and the operator's view of the cluster (item 7): two
// daemons on one machine sharing a real PostgreSQL registry, A configured to hold one server
// (hosting.capacity.servers), B four. A create on A without room lands on B (anonymous, Bearer
// over HTTP/2, the phone flow's second step, the MCP tool; the body sent again whole), answered as a local
// create is, and the server serves through A's edge and B's; with both full a create answers 503
// at_capacity and makes nothing; a create forwarded over the channel is never placed again. `rootbox cluster status` shows
// every host's lease, capacity and servers and this host's channel (sessions, errors, forwarded
// counts, from the running daemon); the metrics count forwarded requests and channel errors.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // servers are plain processes
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { connect as h2connect } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { loadConfig } from '../../src/config/index.js';
import { HostDirectory, RegistryPool } from '../../src/registry/index.js';
import { send, type Answer } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { TEST_CLUSTER_TOKEN } from '../helpers/cluster.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let pool: RegistryPool;

const opts = (host: string, listen: number, servers: number, lease = '3s') => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, listen: `127.0.0.1:${listen}`, advertise: `127.0.0.1:${listen}`, lease, connectTimeout: '500ms' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 }, capacity: { servers } },
});

let from = 0;
/** A create (or any API call) on a daemon's plain HTTP edge; creates each from an address of their own. */
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}): Promise<Answer> =>
  send(d.http, 'api.localhost', method, path, {
    body: o.body,
    headers: o.key ? { authorization: `Bearer ${o.key}` } : {},
    from: method === 'POST' ? `127.0.10.${++from}` : undefined,
  });

/** The servers the registry counts on a host, as its lease reports them. */
const leased = async (host: string) => (await new HostDirectory(pool, 3000).list()).find((h) => h.name === host)?.capacity ?? {};

function page(d: TestDaemon, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: d.http, path: '/', agent: false, headers: { host, accept: 'application/json' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** POST /create over HTTP/2 (TLS, the daemon's local CA) to a daemon's API. */
function createH2(d: TestDaemon, key: string, body: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const s = h2connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: 'api.localhost' });
    s.on('error', reject);
    const data = Buffer.from(JSON.stringify(body, null, 2));
    const req = s.request({
      ':method': 'POST',
      ':path': '/create',
      ':authority': 'api.localhost',
      authorization: `Bearer ${key}`,
      'content-type': 'application/json',
      'content-length': String(data.length),
    });
    let status = 0;
    let text = '';
    req.on('response', (h) => (status = Number(h[':status'])));
    req.setEncoding('utf8');
    req.on('data', (c: string) => (text += c));
    req.on('end', () => {
      s.close();
      resolve({ status, json: JSON.parse(text) });
    });
    req.on('error', reject);
    req.end(data);
  });
}

async function status(d: TestDaemon, json: boolean): Promise<string> {
  const out: string[] = [];
  const code = await clusterCommand(d.cfg, 'status', { json }, { out: (s) => out.push(s), err: (s) => out.push(s) });
  assert.is(code, 0, out.join('\n'));
  return out.join('\n');
}

async function metric(d: TestDaemon, name: string, labels: string): Promise<number> {
  const text = await new Promise<string>((resolve, reject) =>
    request({ host: '127.0.0.1', port: d.daemon.metrics.port, path: '/metrics', agent: false }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (t += c));
      res.on('end', () => resolve(t));
    })
      .on('error', reject)
      .end(),
  );
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

test.before(async () => {
  pg = await startPostgres();
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN } } });
  const out: string[] = [];
  assert.is(await clusterCommand(cfg, 'init', {}, { out: (s) => out.push(s), err: (s) => out.push(s) }), 0, out.join('\n'));
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 3000 });
  a = await startTestDaemon(opts('host-a', await freePort(), 1));
  // B's heartbeats are 20 s apart: its lease shows a new server within this file's run only because a create renews it
  b = await startTestDaemon(opts('host-b', await freePort(), 4, '60s'));
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await pool?.end();
  await pg?.stop();
});

let first: Answer;
let placed: Answer;

test('each lease reports what its host can still take: servers held and allowed, memory and disk room under the ceilings', async () => {
  const c = await until('both leases carry room', async () => {
    const x = await leased('host-a');
    return x.memoryRoomBytes !== undefined && (await leased('host-b')).serversMax === 4 ? x : undefined;
  });
  await until('A sees B up', () => a.daemon.registry!.placements.host('host-b')?.up, 5000);
  assert.is(c.servers, 0);
  assert.is(c.serversMax, 1);
  assert.ok(c.memoryRoomBytes! >= 256 * 1024 * 1024 && c.diskRoomBytes! > 0, JSON.stringify(c));
});

test('a create on a host without room lands on the up host with the most room, answered as a local create, and serves through both hosts', async () => {
  first = await api(a, 'POST', '/create', { body: { subdomains: ['local'] } });
  assert.is(first.status, 200, first.text);
  assert.ok(a.daemon.runtime.get(first.json.id), 'A had room for one');
  const answered = () => a.daemon.channel!.health().find((p) => p.peer === 'host-b')?.forwarded.answered ?? 0;
  const counted = answered();
  // A is full now: the next one goes to B — its body as the client wrote it (other spacing, so another length)
  placed = await api(a, 'POST', '/create', { body: '{ "subdomains" : [ "placed" ] ,  "never_sleep": false }' });
  assert.is(placed.status, 200, placed.text);
  assert.is(a.daemon.runtime.get(placed.json.id), undefined, 'not on A');
  assert.ok(b.daemon.runtime.get(placed.json.id), 'on B');
  assert.is(answered(), counted + 1, "counted in A's channel health as a request forwarded to B");
  await until("B's lease counts it at once, not at B's next heartbeat", async () => (await leased('host-b')).servers === 1, 3000);
  assert.match(placed.json.subdomain, /^placed\./);
  assert.equal(Object.keys(placed.json).sort(), Object.keys(first.json).sort(), 'the same fields as a local create');
  assert.match(placed.json.ssh, new RegExp(`-p ${b.daemon.ssh.port}$`), "B's SSH port: B runs it");
  assert.match(placed.json.api_key, /^rbx_/);
  assert.is(a.daemon.store.servers.all({ withPending: true }).length, 1, 'A made nothing for it');
  assert.ok(a.logs.some((l) => l.msg === 'create placed on another host' && l.host === 'host-b'));
  // its key works on both hosts (the account lives in the registry)
  assert.is((await api(b, 'GET', '/servers', { key: placed.json.api_key })).json.servers[0].id, placed.json.id);
  const root = join(b.daemon.runtime.get(placed.json.id)!.rootfs, 'root', 'www');
  mkdirSync(root, { recursive: true });
  writeFileSync(join(root, 'index.html'), 'served from B');
  for (const d of [b, a]) {
    const r = await until(`the page through ${d === a ? 'A' : 'B'}`, async () => {
      const x = await page(d, 'placed.localhost');
      return x.status === 200 ? x : undefined;
    });
    assert.is(r.body, 'served from B');
  }
});

test("a Bearer create over HTTP/2 on a full host lands on the other host under the caller's account", async () => {
  const r = await createH2(a, first.json.api_key, { subdomains: ['keyed'] });
  assert.is(r.status, 200, JSON.stringify(r.json));
  assert.ok(b.daemon.runtime.get(r.json.id), 'on B');
  assert.is(r.json.api_key, undefined, 'no new key for a Bearer create');
  assert.is(b.daemon.store.servers.get(r.json.id)!.accountId, a.daemon.store.servers.get(first.json.id)!.accountId);
});

test('the phone flow on a full host: the code is texted from here, the create with the code lands on the other host', async () => {
  const phone = '+14155550177';
  const step1 = await api(a, 'POST', '/create', { body: { phone } });
  assert.is(step1.status, 200, step1.text);
  assert.is(step1.json.verification_required, true);
  const sms = a.logs.find((l) => String(l.msg).startsWith('sms (log provider)') && l.to === phone);
  const code = /\b(\d{6})\b/.exec(String(sms?.text))?.[1];
  assert.ok(code, 'the code was texted by A');
  const r = await api(a, 'POST', '/create', { body: { phone, code, subdomains: ['phoned'] } });
  assert.is(r.status, 200, r.text);
  assert.ok(b.daemon.runtime.get(r.json.id), 'on B');
  assert.is(r.json.credits.tier, 'verified');
  assert.match(r.json.account_note, /created a new verified account/);
  assert.match(r.json.api_key, /^rbx_/);
});

test("the MCP tool create_server on a full host lands on the other host, the tool's answer that host's", async () => {
  const client = new Client({ name: 'rootbox-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://api.localhost:${a.http}/mcp`)));
  try {
    const r = await client.callTool({ name: 'create_server', arguments: { subdomains: ['viamcp'] } });
    assert.not.ok(r.isError, JSON.stringify(r.content));
    const created = r.structuredContent as { id: string; api_key: string };
    assert.ok(b.daemon.runtime.get(created.id), 'on B');
    assert.match(created.api_key, /^rbx_/);
  } finally {
    await client.close();
  }
});

test('with every host full a create answers 503 at_capacity and makes nothing', async () => {
  await until("B's lease shows it full", async () => (await leased('host-b')).servers === 4);
  const accounts = async () => Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM accounts')).rows[0].n);
  const before = [a.daemon.store.servers.all({ withPending: true }).length, b.daemon.store.servers.all({ withPending: true }).length, await accounts()];
  const r = await api(a, 'POST', '/create', { body: { subdomains: ['nowhere'] } });
  assert.is(r.status, 503, r.text);
  assert.is(r.json.error, 'at_capacity');
  assert.match(r.json.detail, /no other host has room/);
  const after = [a.daemon.store.servers.all({ withPending: true }).length, b.daemon.store.servers.all({ withPending: true }).length, await accounts()];
  assert.equal(after, before, 'no server, no anonymous account');
});

test('a create that came over the channel is never placed again: the full host answers at_capacity though the sender has room', async () => {
  assert.is((await api(a, 'DELETE', `/servers/${first.json.id}`, { key: first.json.api_key })).status, 200);
  await until("A's lease shows room", async () => (await leased('host-a')).servers === 0);
  // A sends a create to B (full) over the channel, as A's placement does
  const shim: Server = createServer((req, res) => {
    void a.daemon.channel!.forwardApi('host-b', req, res, { host: 'api.localhost', scheme: 'http', requestId: 'placed-once-0001', ip: '127.0.0.1' });
  });
  await new Promise<void>((r) => shim.listen(0, '127.0.0.1', r));
  try {
    const r = await send((shim.address() as AddressInfo).port, 'api.localhost', 'POST', '/create', { body: { subdomains: ['bounced'] } });
    assert.is(r.status, 503, r.text);
    assert.is(r.json.error, 'at_capacity');
    assert.match(r.json.detail, /host-a placed it here/);
    assert.is(a.daemon.store.servers.all({ withPending: true }).length, 0, 'B did not send it back to A');
  } finally {
    shim.close();
  }
});

test('cluster status shows each host, its lease, capacity and servers, and this host’s channel: session up, forwarded counts', async () => {
  assert.is((await page(a, 'placed.localhost')).status, 200); // one more forwarded through A's channel
  const j = JSON.parse(await status(a, true));
  const hosts = Object.fromEntries((j.hosts as { name: string }[]).map((h) => [h.name, h])) as Record<string, any>;
  assert.ok(hosts['host-a'].up && hosts['host-b'].up);
  assert.is(hosts['host-b'].servers, 4);
  assert.is(hosts['host-b'].capacity.serversMax, 4);
  assert.ok(hosts['host-b'].capacity.memoryRoomBytes > 0);
  assert.is(j.channel.running, true);
  assert.is(j.channel.host, 'host-a');
  const peer = j.channel.peers.find((p: { peer: string }) => p.peer === 'host-b');
  assert.ok(peer, JSON.stringify(j.channel));
  assert.is(peer.session, 'up');
  assert.ok(peer.forwarded.answered >= 2, JSON.stringify(peer));
  const text = await status(a, false);
  assert.match(text, /host-b\s+up\s+\S+ s left\s+4 of 4/);
  assert.match(text, /channel of host-a to its peers:/);
  assert.match(text, /host-b\s+up\s+.*answered \d+/);
  assert.ok((await metric(a, 'rootbox_channel_forwarded_total', 'peer="host-b",outcome="answered"')) >= 2);
});

test('a peer whose channel is gone shows down with its last error in cluster status, and the metrics count the failures', async () => {
  const before = await metric(a, 'rootbox_channel_errors_total', 'peer="host-b"');
  const unavailable = await metric(a, 'rootbox_channel_forwarded_total', 'peer="host-b",outcome="unavailable"');
  await b.daemon.channel!.stop(); // B's listener gone; its lease still runs
  const r = await until('A answers 503 for the server on B', async () => {
    const x = await page(a, 'placed.localhost');
    return x.status === 503 ? x : undefined;
  });
  assert.is(JSON.parse(r.body).error, 'host_unavailable');
  const j = JSON.parse(await status(a, true));
  const peer = j.channel.peers.find((p: { peer: string }) => p.peer === 'host-b');
  assert.is(peer.session, 'down');
  assert.ok(peer.errors >= 1 && peer.last_error, JSON.stringify(peer));
  assert.ok(peer.forwarded.unavailable >= 1);
  assert.match(await status(a, false), /host-b\s+down\s+.*unavailable \d+.*connect: /);
  assert.ok((await metric(a, 'rootbox_channel_errors_total', 'peer="host-b"')) > before);
  assert.ok((await metric(a, 'rootbox_channel_forwarded_total', 'peer="host-b",outcome="unavailable"')) > unavailable);
});

test.run();
