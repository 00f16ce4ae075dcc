// A host whose registry does not answer at start listens at once (issue 36 item 6): the edge
// (HTTP and HTTPS) and the SSH server accept connections within 2 s of the start although no
// registry round trip has completed — against a registry address that accepts the TCP connection
// and never answers (a primary gone silent during a failover: each attempt costs the whole
// cluster.connectTimeout) and against a closed port (a stopped PostgreSQL). Meanwhile (while the
// start still waits on the registry, and after) what needs the registry answers 503
// registry_unavailable with Retry-After, and the health check answers.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { request } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { sleep } from '../helpers/wait.js';

/** Whether something accepts a TCP connection on 127.0.0.1:port now. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port }, () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });
}

/** A TCP listener that takes connections and never says a word (they end with it). */
async function silent(): Promise<{ port: number; server: Server; sockets: Socket[] }> {
  const sockets: Socket[] = [];
  const server = createServer((s) => void sockets.push(s.on('error', () => {})));
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { port, server, sockets };
}

/** Starts a daemon whose registry is `registry`; answers how long after the start its edge and
 *  SSH listeners accepted a connection (polled while the start is under way), and the daemon. */
async function startAgainst(registry: string, checked = () => {}): Promise<{ ms: { http: number; https: number; ssh: number }; d: TestDaemon }> {
  const [http, https, ssh, channel] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const t0 = Date.now();
  const starting = startTestDaemon({
    http: { host: '127.0.0.1', port: http },
    https: { host: '127.0.0.1', port: https },
    ssh: { host: '127.0.0.1', port: ssh },
    cluster: {
      registry,
      host: `listen-${process.pid}`,
      listen: `127.0.0.1:${channel}`,
      advertise: `127.0.0.1:${channel}`,
      connectTimeout: '3s',
      statementTimeout: '3s',
      lease: '3s',
    },
  });
  let failed: unknown;
  starting.catch((e) => (failed = e));
  const ms: Record<string, number> = {};
  const ports = { http, https, ssh };
  while (Object.keys(ms).length < 3 && Date.now() - t0 < 10_000 && failed === undefined) {
    for (const [name, port] of Object.entries(ports)) if (ms[name] === undefined && (await accepts(port))) ms[name] = Date.now() - t0;
    await sleep(20);
  }
  // while the start waits on the registry: the health check answers, what needs the registry is 503 with Retry-After
  if (failed === undefined && Object.keys(ms).length === 3) await checkServing({ http } as TestDaemon);
  checked(); // what the start's wait was to show is shown: the registry may end it now
  const d = await starting;
  return { ms: ms as { http: number; https: number; ssh: number }, d };
}

/** One plain HTTP request to the API's host on the daemon's HTTP port. */
function api(port: number, method: string, path: string, body?: string): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: { host: 'api.localhost', 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function checkServing(d: TestDaemon): Promise<void> {
  const health = await api(d.http, 'GET', '/healthz');
  assert.is(health.status, 200, health.text);
  // a create needs the registry (its subdomain claimed there): 503 with when to try again
  const create = await api(d.http, 'POST', '/create', '{}');
  assert.is(create.status, 503, create.text);
  assert.is(JSON.parse(create.text).error, 'registry_unavailable');
  assert.ok(Number(create.headers['retry-after']) >= 1, `Retry-After: ${create.headers['retry-after']}`);
}

test('a registry that accepts the connection and never answers: the edge and SSH listen within 2 s', async () => {
  const reg = await silent();
  try {
    // once the listeners and the answers meanwhile are checked, the silent registry goes away (as
    // a stopped one): the start ends at its next attempt instead of after every connect timeout
    const gone = () => (reg.server.close(), reg.sockets.forEach((s) => s.destroy()));
    const { ms, d } = await startAgainst(`postgres://rootbox:pw@127.0.0.1:${reg.port}/rootbox`, gone);
    try {
      for (const [name, t] of Object.entries({ http: ms.http, https: ms.https, ssh: ms.ssh }))
        assert.ok(t !== undefined && t < 2000, `${name} listened after ${t ?? 'more than 10000'} ms (${JSON.stringify(ms)})`);
      await checkServing(d);
    } finally {
      await d.stop();
    }
  } finally {
    for (const s of reg.sockets) s.destroy();
    reg.server.close();
  }
});

test('a closed registry port (a stopped PostgreSQL): the edge and SSH listen within 2 s', async () => {
  const closed = await freePort();
  const { ms, d } = await startAgainst(`postgres://rootbox:pw@127.0.0.1:${closed}/rootbox`);
  try {
    for (const [name, t] of Object.entries({ http: ms.http, https: ms.https, ssh: ms.ssh }))
      assert.ok(t !== undefined && t < 2000, `${name} listened after ${t ?? 'more than 10000'} ms (${JSON.stringify(ms)})`);
    await checkServing(d);
  } finally {
    await d.stop();
  }
});

test.run();
