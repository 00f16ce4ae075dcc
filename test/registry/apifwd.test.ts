// API calls that act on a server reach the host that runs it (issue 29 item 2, the API half):
// two daemons with real runc containers sharing a PostgreSQL registry. First the channel's
// primitive (`channel.forwardApi`, `channel.upgradeApi`) driven from a plain HTTP server in this
// process that hands every request to B's channel: the request reaches A's API app with its
// Authorization (checked on A), its body streamed, the client's request id, WebSocket upgrades
// too (stdin pushed at a command that does not read it is held back on the way, not in either
// daemon); a stale epoch costs one retry; a host that is down answers 503 host_unavailable at once.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import WebSocket from 'ws';
import type { RequestInfo } from '../../src/http/index.js';
import { parseExposition, sampleValue } from '../helpers/prom.js';
import { until } from '../helpers/wait.js';
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
    // a failure is this request's answer (500), never the test process's end: the daemons are cleaned up after it
    try {
      c.b.daemon.channel!.forwardApi(r.host, req, res, r.info, r.o).catch((e: unknown) => res.writeHead(500).end(String(e)));
    } catch (e) {
      res.writeHead(500).end(String(e));
    }
  });
  shim.on('upgrade', (req: IncomingMessage, socket, head) => {
    const r = route(req);
    try {
      c.b.daemon.channel!.upgradeApi(r.host, req, socket, head, r.info, r.o);
    } catch {
      socket.destroy();
    }
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
  closed.catch(() => {}); // awaited below; a failed handshake is that test's failure, not the process's
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

test('forwardApi and upgradeApi: a stale epoch costs one retry and reaches the server; a host that is down answers 503 host_unavailable at once', async () => {
  const p = c.b.daemon.registry!.placements.byServer(srv.id)!;
  const stale = await viaShim('GET', `/servers/${srv.id}`, { key: srv.api_key, headers: { 'x-test-server': srv.id, 'x-test-epoch': String(p.epoch + 1000) } });
  assert.is(stale.status, 200, stale.body.toString());
  assert.is(json(stale).id, srv.id);
  // a body past the retry buffer was streamed to the old owner already: no retry, a clear 503 (the client sends it again)
  const big = await viaShim('PUT', `/servers/${srv.id}/files?path=/root/stale.bin`, {
    key: srv.api_key,
    body: randomBytes(2 * 1024 * 1024),
    headers: { 'x-test-server': srv.id, 'x-test-epoch': String(p.epoch + 1000) },
  });
  assert.is(big.status, 503, big.body.toString());
  assert.is(json(big).error, 'host_unavailable');
  // a WebSocket too: the handshake is sent again to where the server is
  const ws = new WebSocket(`ws://127.0.0.1:${shimPort}/servers/${srv.id}/exec`, {
    headers: { host: 'api.localhost', authorization: `Bearer ${srv.api_key}`, 'x-test-server': srv.id, 'x-test-epoch': String(p.epoch + 1000) },
  });
  const lines: Record<string, any>[] = [];
  const closed = new Promise<number>((resolve, reject) => {
    ws.on('message', (m) => lines.push(JSON.parse(m.toString())));
    ws.on('close', (code) => resolve(code));
    ws.on('error', reject);
  });
  closed.catch(() => {}); // awaited below; a failed handshake is that test's failure, not the process's
  ws.on('open', () => ws.send(JSON.stringify({ command: 'echo retried' })));
  assert.is(await closed, 1000, JSON.stringify(lines));
  assert.equal(lines[0], { stream: 'stdout', data: 'retried\n' });
  const nowhere = await viaShim('GET', `/servers/${srv.id}`, { key: srv.api_key, headers: { 'x-test-host': 'host-nowhere' } });
  assert.is(nowhere.status, 503);
  assert.is(json(nowhere).error, 'host_unavailable');
  assert.ok(nowhere.ms < 1000, `answered in ${nowhere.ms} ms`);
});

/** One request to B's API edge (plain HTTP, api.localhost). */
function viaB(method: string, path: string, o: { key?: string; body?: Buffer; headers?: Record<string, string> } = {}): Promise<Got> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: c.b.http,
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
const jsonBody = (o: unknown) => ({ body: Buffer.from(JSON.stringify(o)), headers: { 'content-type': 'application/json' } });

let mine: { id: string; api_key: string };

test("through B's API: A's server is read and listed with B's own, another account's key is refused by A", async () => {
  const r = await api(c.a, 'POST', '/create', { body: { subdomains: ['fwd-two'] } });
  assert.is(r.status, 200, r.text);
  mine = r.json;
  const got = await viaB('GET', `/servers/${mine.id}`, { key: mine.api_key });
  assert.is(got.status, 200, got.body.toString());
  assert.is(json(got).id, mine.id);
  assert.is(json(got).subdomain, 'fwd-two.localhost');
  // the same account creates one on B: the list on either host shows both, in the list's shape
  const onB = await api(c.b, 'POST', '/create', { key: mine.api_key, body: { subdomains: ['fwd-three'] } });
  assert.is(onB.status, 200, onB.text);
  for (const d of [c.a, c.b]) {
    const list = await api(d, 'GET', '/servers', { key: mine.api_key });
    assert.is(list.status, 200, list.text);
    assert.equal(Object.keys(list.json), ['servers']);
    const ids = (list.json.servers as { id: string; subdomain: string; state: string }[]).map((s) => s.id).sort();
    assert.equal(ids, [mine.id, onB.json.id].sort(), `listed on ${d === c.a ? 'A' : 'B'}`);
  }
  const stranger = await api(c.a, 'POST', '/create', {});
  for (const [method, path] of [
    ['GET', `/servers/${mine.id}`],
    ['POST', `/servers/${mine.id}/restart`],
    ['DELETE', `/servers/${mine.id}`],
  ]) {
    const no = await viaB(method, path, { key: stranger.json.api_key });
    assert.is(no.status, 404, `${method} ${path}: ${no.body.toString()}`);
    assert.is(json(no).error, 'server_not_found');
  }
  const bad = await viaB('POST', `/servers/${mine.id}/exec`, { key: 'rbx_' + '0'.repeat(32), ...jsonBody({ command: 'true' }) });
  assert.is(bad.status, 401);
  assert.ok(c.a.daemon.store.servers.get(mine.id), 'still there');
});

test("through B's API: exec on A's server, plain, streamed as NDJSON and over a WebSocket", async () => {
  const plain = await viaB('POST', `/servers/${mine.id}/exec`, { key: mine.api_key, ...jsonBody({ command: 'echo out-$((6*7)); echo err >&2', stdin: '' }) });
  assert.is(plain.status, 200, plain.body.toString());
  assert.equal([json(plain).exit_code, json(plain).stdout, json(plain).stderr], [0, 'out-42\n', 'err\n']);
  const ndjson = await viaB('POST', `/servers/${mine.id}/exec`, {
    key: mine.api_key,
    body: Buffer.from(JSON.stringify({ command: 'for i in 1 2 3; do echo line$i; done' })),
    headers: { 'content-type': 'application/json', accept: 'application/x-ndjson' },
  });
  assert.is(ndjson.status, 200);
  assert.match(String(ndjson.headers['content-type']), /application\/x-ndjson/);
  const lines = ndjson.body
    .toString()
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, any>);
  assert.is(
    lines
      .filter((l) => l.stream === 'stdout')
      .map((l) => l.data)
      .join(''),
    'line1\nline2\nline3\n',
  );
  assert.is(lines.at(-1)!.exit_code, 0);
  const ws = new WebSocket(`ws://127.0.0.1:${c.b.http}/servers/${mine.id}/exec`, {
    headers: { host: 'api.localhost', authorization: `Bearer ${mine.api_key}` },
  });
  const out: Record<string, any>[] = [];
  const closed = new Promise<number>((resolve, reject) => {
    ws.on('message', (m) => {
      const line = JSON.parse(m.toString());
      out.push(line);
      if (line.stream === 'stdout' && /got a/.test(line.data)) ws.send(Buffer.from('b\n'));
    });
    ws.on('close', (code) => resolve(code));
    ws.on('error', reject);
  });
  closed.catch(() => {}); // awaited below; a failed handshake is that test's failure, not the process's
  await new Promise<void>((resolve, reject) => (ws.once('open', () => resolve()), ws.once('error', reject)));
  ws.send(JSON.stringify({ command: 'read x; echo "got $x"; read y; echo "and $y"', stdin: 'a\n' }));
  assert.is(await closed, 1000, JSON.stringify(out));
  assert.is(
    out
      .filter((l) => l.stream === 'stdout')
      .map((l) => l.data)
      .join(''),
    'got a\nand b\n',
  );
});

test("through B's API: stdin pushed at a command on A that does not read pauses the way there; A holds a small buffer, and the client leaving still ends the command", async () => {
  const MiB = 1024 * 1024;
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const buffers = () => (gc(), process.memoryUsage().arrayBuffers);
  const heldStdin = () =>
    new Promise<number>((resolve, reject) => {
      request({ host: '127.0.0.1', port: c.a.daemon.metrics.port, path: '/metrics' }, (res) => {
        let b = '';
        res.on('data', (x: Buffer) => (b += x));
        res.on('end', () => resolve(sampleValue(parseExposition(b), 'rootbox_held_bytes', { door: 'exec_stdin' })));
      })
        .on('error', reject)
        .end();
    });
  const ws = new WebSocket(`ws://127.0.0.1:${c.b.http}/servers/${mine.id}/exec`, {
    headers: { host: 'api.localhost', authorization: `Bearer ${mine.api_key}` },
  });
  ws.on('error', () => {});
  const first = new Promise<Record<string, any>>((resolve) => ws.once('message', (m) => resolve(JSON.parse(m.toString()))));
  await new Promise<void>((resolve, reject) => (ws.once('open', () => resolve()), ws.once('error', reject)));
  ws.send(JSON.stringify({ command: 'echo started; exec sleep 122', timeout: 200 }));
  assert.equal(await first, { stream: 'stdout', data: 'started\n' });
  const before = buffers();
  const PUSH = 256 * MiB;
  const chunk = Buffer.alloc(MiB, 120);
  let pushed = 0;
  const taken = () => pushed - ws.bufferedAmount;
  let last = -1;
  await until(
    'the socket takes no more stdin, or all of it',
    () => {
      while (ws.bufferedAmount < 4 * MiB && pushed < PUSH) {
        ws.send(chunk);
        pushed += MiB;
      }
      const now = taken();
      const stuck = now === last;
      last = now;
      return stuck || now >= PUSH;
    },
    120_000,
    500,
  );
  assert.ok(taken() < 64 * MiB, `B took ${(taken() / MiB).toFixed(0)} MiB of stdin for a command on A that reads none`);
  const held = await heldStdin();
  assert.ok(held <= 2 * MiB, `A holds ${held} bytes of stdin`);
  const grew = buffers() - before;
  assert.ok(grew < 32 * MiB, `the buffers (A's and B's) grew by ${(grew / MiB).toFixed(0)} MiB`);
  ws.terminate();
  const ps = async () => json(await viaB('POST', `/servers/${mine.id}/exec`, { key: mine.api_key, ...jsonBody({ command: 'ps -eo args=' }) })).stdout as string;
  await until('the command is gone', async () => !(await ps()).includes('sleep 122'), 15_000, 200);
  await until('nothing held', async () => (await heldStdin()) === 0, 15_000, 200);
});

test("through B's API: files of A's server up and down byte for byte, its logs", async () => {
  const blob = randomBytes(5 * 1024 * 1024 + 3);
  const put = await viaB('PUT', `/servers/${mine.id}/files?path=/root/up/blob.bin`, { key: mine.api_key, body: blob });
  assert.is(put.status, 200, put.body.toString());
  const down = await viaB('GET', `/servers/${mine.id}/files?path=/root/up/blob.bin`, { key: mine.api_key });
  assert.is(down.status, 200);
  assert.is(sha(down.body), sha(blob), 'the same bytes back');
  const part = await viaB('GET', `/servers/${mine.id}/files?path=/root/up/blob.bin`, { key: mine.api_key, headers: { range: 'bytes=100-199' } });
  assert.is(part.status, 206);
  assert.ok(part.body.equals(blob.subarray(100, 200)));
  const list = await viaB('GET', `/servers/${mine.id}/files?path=/root/up&list=1`, { key: mine.api_key });
  assert.is(list.status, 200, list.body.toString());
  assert.match(list.body.toString(), /blob\.bin/);
  // what the server's run.sh would have written: the logs read it on A
  const w = await viaB('POST', `/servers/${mine.id}/exec`, { key: mine.api_key, ...jsonBody({ command: 'echo "logged-through-b" >> /var/log/run.sh.log' }) });
  assert.is(w.status, 200, w.body.toString());
  const logs = await viaB('GET', `/servers/${mine.id}/logs?tail=10`, { key: mine.api_key });
  assert.is(logs.status, 200, logs.body.toString());
  assert.ok((json(logs).lines as string[]).includes('logged-through-b'), logs.body.toString());
});

test("through B's API: restart, expose and unexpose A's server, its domains", async () => {
  const boot = async () => {
    const r = await viaB('POST', `/servers/${mine.id}/exec`, { key: mine.api_key, ...jsonBody({ command: 'cut -d" " -f22 /proc/1/stat' }) });
    assert.is(r.status, 200, r.body.toString());
    return json(r).stdout as string;
  };
  const before = await boot();
  const restarted = await viaB('POST', `/servers/${mine.id}/restart`, { key: mine.api_key });
  assert.is(restarted.status, 200, restarted.body.toString());
  assert.is(json(restarted).id, mine.id);
  assert.is.not(await boot(), before, 'a new init in the server');
  const exposed = await viaB('POST', '/expose', { key: mine.api_key, ...jsonBody({ server: mine.id, port: 8080 }) });
  assert.is(exposed.status, 200, exposed.body.toString());
  assert.is(json(exposed).container_port, 8080);
  const seen = await api(c.a, 'GET', `/servers/${mine.id}`, { key: mine.api_key });
  assert.equal(
    (seen.json.exposed_ports as { container_port: number }[]).map((p) => p.container_port),
    [8080],
    'A published it',
  );
  const gone = await viaB('DELETE', '/expose', { key: mine.api_key, ...jsonBody({ server: mine.id, port: 8080 }) });
  assert.is(gone.status, 200, gone.body.toString());
  assert.equal((await api(c.a, 'GET', `/servers/${mine.id}`, { key: mine.api_key })).json.exposed_ports, []);
  // anything else under /servers/{id}: its own domains, as A keeps them
  const domains = await viaB('GET', `/servers/${mine.id}/domains`, { key: mine.api_key });
  assert.is(domains.status, 200, domains.body.toString());
  assert.equal(json(domains), { domains: [] });
});

test("B's MCP endpoint (official SDK client) acts on A's server: list, exec, write and read a file, logs", async () => {
  const transport = new StreamableHTTPClientTransport(new URL(`http://api.localhost:${c.b.http}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${mine.api_key}` } },
  });
  const client = new Client({ name: 'rootbox-test', version: '1.0.0' });
  await client.connect(transport);
  try {
    type Text = { type: string; text: string };
    const call = async (name: string, args: Record<string, unknown>) => {
      const r = await client.callTool({ name, arguments: args });
      assert.not.ok(r.isError, `${name}: ${JSON.stringify(r.content)}`);
      return JSON.parse((r.content as Text[])[0].text) as Record<string, any>;
    };
    const listed = await call('list_servers', {});
    assert.ok(
      (listed.servers as { id: string }[]).some((s) => s.id === mine.id),
      "A's server listed by B",
    );
    assert.is((await call('get_server', { id: mine.id })).id, mine.id);
    const ran = await call('exec', { id: mine.id, command: 'echo mcp-$((2+3))' });
    assert.is(ran.stdout, 'mcp-5\n');
    const bytes = randomBytes(40_000);
    await call('write_file', { id: mine.id, path: '/root/mcp.bin', content: bytes.toString('base64'), encoding: 'base64' });
    const read = await call('read_file', { id: mine.id, path: '/root/mcp.bin', encoding: 'base64' });
    assert.ok(Buffer.from(read.content as string, 'base64').equals(bytes), 'the same bytes back');
    assert.is(read.size, bytes.length);
    const logs = await call('server_logs', { id: mine.id });
    assert.ok((logs.lines as string[]).includes('logged-through-b'));
    const other = await api(c.a, 'POST', '/create', {});
    const strangerTransport = new StreamableHTTPClientTransport(new URL(`http://api.localhost:${c.b.http}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${other.json.api_key}` } },
    });
    const stranger = new Client({ name: 'rootbox-test', version: '1.0.0' });
    await stranger.connect(strangerTransport);
    const refused = await stranger.callTool({ name: 'exec', arguments: { id: mine.id, command: 'true' } });
    await stranger.close();
    assert.ok(refused.isError);
    assert.is(JSON.parse((refused.content as Text[])[0].text).error, 'server_not_found');
  } finally {
    await client.close();
  }
});

test("through B's API: delete A's server; then it is gone everywhere", async () => {
  const del = await viaB('DELETE', `/servers/${mine.id}`, { key: mine.api_key });
  assert.is(del.status, 200, del.body.toString());
  assert.is(c.a.daemon.store.servers.get(mine.id), undefined, 'A deleted it');
  const after = await viaB('GET', `/servers/${mine.id}`, { key: mine.api_key });
  assert.is(after.status, 404, after.body.toString());
  assert.is(json(after).error, 'server_not_found');
});

test("a server made on A a moment ago, before B's cache heard of it, is found by one registry read", async () => {
  // B's cache stops following: notifications ignored, its timer reads only the hosts (white-box: the cache's own fields)
  const cache = c.b.daemon.registry!.placements as unknown as {
    listener: { client: { removeAllListeners(e: string): void; end(): Promise<void> } }; // listener.ts's LISTEN connection
    view: { refresh(): Promise<void> }; // hostsview.ts
    timer: NodeJS.Timeout;
    tick(): Promise<void>;
  };
  cache.listener.client.removeAllListeners('notification');
  clearInterval(cache.timer);
  const hosts = setInterval(() => void cache.view.refresh(), 200);
  try {
    const r = await api(c.a, 'POST', '/create', { key: srv.api_key, body: { subdomains: ['fwd-late'] } });
    assert.is(r.status, 200, r.text);
    assert.is(c.b.daemon.registry!.placements.byServer(r.json.id), undefined, "B's cache does not know it");
    const got = await viaB('POST', `/servers/${r.json.id}/exec`, { key: srv.api_key, ...jsonBody({ command: 'echo late' }) });
    assert.is(got.status, 200, got.body.toString());
    assert.is(json(got).stdout, 'late\n');
  } finally {
    clearInterval(hosts);
    cache.timer = setInterval(() => void cache.tick(), 200);
    await cache.listener.client.end(); // re-opened with its notification handler
  }
});

test("the list does not wait on a host that stopped answering: B's own servers come back, A's from B's placement cache as unavailable", async () => {
  // A's API takes forwarded lists and never answers them (a host frozen or overloaded; its lease still runs)
  const router = c.a.daemon.hosting.router;
  const handle = router.handle;
  router.handle = (req, res, info) => (info.forwarded && req.url === '/servers' ? new Promise<void>(() => {}) : handle.call(router, req, res, info));
  try {
    const onB = await api(c.b, 'POST', '/create', { key: srv.api_key, body: { subdomains: ['fwd-bee'] } });
    assert.is(onB.status, 200, onB.text);
    const deadline = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the list waited on A for 10 s')), 10_000).unref());
    const list = await Promise.race([viaB('GET', '/servers', { key: srv.api_key }), deadline]);
    assert.is(list.status, 200, list.body.toString());
    const servers = json(list).servers as { id: string; state: string }[];
    const placements = c.b.daemon.registry!.placements;
    const mine = servers.find((x) => x.id === onB.json.id);
    assert.ok(mine && mine.state !== 'unavailable', JSON.stringify(mine));
    const hostA = placements.byServer(srv.id)!.host;
    const onA = placements.ofAccount(placements.byServer(onB.json.id)!.accountId).filter((p) => p.host === hostA);
    assert.ok(onA.length > 0, 'the account has servers on A');
    assert.equal(
      servers
        .filter((x) => x.id !== onB.json.id)
        .map((x) => [x.id, x.state])
        .sort(),
      onA.map((p) => [p.serverId, 'unavailable']).sort(),
    );
  } finally {
    router.handle = handle;
  }
});

test("with A gone, B answers for A's server at once: 503 host_unavailable as JSON", async () => {
  await c.a.stop();
  const r = await viaB('GET', `/servers/${srv.id}/logs`, { key: srv.api_key });
  assert.is(r.status, 503, r.body.toString());
  assert.is(json(r).error, 'host_unavailable');
  assert.ok(r.ms < 1500, `answered in ${Math.round(r.ms)} ms`);
});

test.run();
