// API calls that act on a server reach the host that runs it (issue 29 item 2, the API half):
// two daemons with real runc containers sharing a PostgreSQL registry. First the channel's
// primitive (`channel.forwardApi`, `channel.upgradeApi`) driven from a plain HTTP server in this
// process that hands every request to B's channel: the request reaches A's API app with its
// Authorization (checked on A), its body streamed, the client's request id, WebSocket upgrades
// too; a stale epoch costs one retry; a host that is down answers 503 host_unavailable at once.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import WebSocket from 'ws';
import type { RequestInfo } from '../../src/http/index.js';
import { api, startTwoHosts, type TwoHosts } from './fixtures/twohosts.js';

let c: TwoHosts;
let shim: Server;
let shimPort = 0;

/** What the shim does with a request: to which host, for which server (its placement as B's cache has it, or an epoch forced). */
const route = (req: IncomingMessage) => {
  const host = String(req.headers['x-test-host'] ?? 'host-a');
  const id = req.headers['x-test-server'] as string | undefined;
  const p = id ? c.b.daemon.registry!.placements.byServer(id) : undefined;
  const epoch = req.headers['x-test-epoch'];
  const server = p && { serverId: p.serverId, slug: p.slug, epoch: epoch === undefined ? p.epoch : Number(epoch) };
  const info: RequestInfo = { host: 'api.localhost', scheme: 'http', requestId: String(req.headers['x-request-id'] ?? 'shim-request-0001'), ip: '127.0.0.1' };
  return { host, info, o: server ? { server } : {} };
};

test.before(async () => {
  c = await startTwoHosts();
  shim = createServer((req, res) => {
    const r = route(req);
    void c.b.daemon.channel!.forwardApi(r.host, req, res, r.info, r.o);
  });
  shim.on('upgrade', (req: IncomingMessage, socket, head) => {
    const r = route(req);
    c.b.daemon.channel!.upgradeApi(r.host, req, socket, head, r.info, r.o);
  });
  await new Promise<void>((r) => shim.listen(0, '127.0.0.1', r));
  shimPort = (shim.address() as AddressInfo).port;
});
test.after(async () => {
  shim?.close();
  await c?.stop();
});

interface Got {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  ms: number;
}
function viaShim(method: string, path: string, o: { key?: string; body?: Buffer; headers?: Record<string, string> } = {}): Promise<Got> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: shimPort,
        method,
        path,
        agent: false,
        headers: {
          host: 'api.localhost',
          ...(o.key ? { authorization: `Bearer ${o.key}` } : {}),
          ...(o.body ? { 'content-length': String(o.body.length) } : {}),
          ...o.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (x: Buffer) => chunks.push(x));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks), ms: performance.now() - t0 }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(o.body);
  });
}
const json = (g: Got) => JSON.parse(g.body.toString()) as Record<string, any>;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let srv: { id: string; api_key: string };

test("forwardApi: an API request reaches the named host's API app with its Authorization, checked there, and its answer comes back", async () => {
  const r = await api(c.a, 'POST', '/create', { body: { subdomains: ['fwd-one'] } });
  assert.is(r.status, 200, r.text);
  srv = r.json;
  assert.is(c.b.daemon.store.servers.get(srv.id), undefined, 'B does not run it');
  const got = await viaShim('GET', `/servers/${srv.id}`, { key: srv.api_key, headers: { 'x-request-id': 'client-chosen-id-7' } });
  assert.is(got.status, 200, got.body.toString());
  assert.is(json(got).id, srv.id);
  const other = await api(c.a, 'POST', '/create', {});
  assert.is(other.status, 200, other.text);
  const refused = await viaShim('GET', `/servers/${srv.id}`, { key: other.json.api_key });
  assert.is(refused.status, 404, 'another account does not see it (ownership checked on A)');
  assert.is(json(refused).error, 'server_not_found');
  const bad = await viaShim('GET', `/servers/${srv.id}`, { key: 'rbx_' + 'x'.repeat(32) });
  assert.is(bad.status, 401);
});

test('forwardApi: a body larger than the retry buffer is streamed to the owner and a file comes back byte for byte', async () => {
  const blob = randomBytes(3 * 1024 * 1024 + 17);
  const put = await viaShim('PUT', `/servers/${srv.id}/files?path=/root/blob.bin`, {
    key: srv.api_key,
    body: blob,
    headers: { 'content-type': 'application/octet-stream' },
  });
  assert.is(put.status, 200, put.body.toString());
  const back = await viaShim('GET', `/servers/${srv.id}/files?path=/root/blob.bin`, { key: srv.api_key });
  assert.is(back.status, 200);
  assert.is(sha(back.body), sha(blob));
});

test('upgradeApi: exec over a WebSocket runs on the owner, stdin and output both ways', async () => {
  const ws = new WebSocket(`ws://127.0.0.1:${shimPort}/servers/${srv.id}/exec`, { headers: { host: 'api.localhost', authorization: `Bearer ${srv.api_key}` } });
  const out: Record<string, any>[] = [];
  const closed = new Promise<number>((resolve, reject) => {
    ws.on('message', (m) => {
      const line = JSON.parse(m.toString());
      out.push(line);
      // the second line of stdin once the command answered the first (a message sent later, on the open socket)
      if (line.stream === 'stdout' && /got one/.test(line.data)) ws.send(JSON.stringify({ stdin: 'two\n' }));
    });
    ws.on('close', (code) => resolve(code));
    ws.on('error', reject);
  });
  await new Promise<void>((resolve, reject) => (ws.once('open', () => resolve()), ws.once('error', reject)));
  ws.send(JSON.stringify({ command: 'read a; echo "got $a"; read b; echo "then $b on $(hostname)"', stdin: 'one\n' }));
  assert.is(await closed, 1000, JSON.stringify(out));
  const stdout = out
    .filter((l) => l.stream === 'stdout')
    .map((l) => l.data)
    .join('');
  assert.match(stdout, /^got one\nthen two on \S+\n$/, JSON.stringify(out));
  assert.is(out.at(-1)!.exit_code, 0);
});

test('forwardApi: a stale epoch costs one retry and reaches the server; a host that is down answers 503 host_unavailable at once', async () => {
  const p = c.b.daemon.registry!.placements.byServer(srv.id)!;
  const stale = await viaShim('GET', `/servers/${srv.id}`, { key: srv.api_key, headers: { 'x-test-server': srv.id, 'x-test-epoch': String(p.epoch + 1000) } });
  assert.is(stale.status, 200, stale.body.toString());
  assert.is(json(stale).id, srv.id);
  const nowhere = await viaShim('GET', `/servers/${srv.id}`, { key: srv.api_key, headers: { 'x-test-host': 'host-nowhere' } });
  assert.is(nowhere.status, 503);
  assert.is(json(nowhere).error, 'host_unavailable');
  assert.ok(nowhere.ms < 1000, `answered in ${nowhere.ms} ms`);
});

test.run();
