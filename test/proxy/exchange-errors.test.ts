// What a client sees when the connection to an app fails with an error of ours: the 502 names the
// socket's error code at most, never another error's message (which may carry host paths or
// anything else); the message goes to the log. A real client, a real app socket and the real
// connection pool; only the error on the app's socket is made by the test (socket.destroy(err),
// the way any library hands an error to a socket).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, request, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { createLogger } from '../../src/log/index.js';
import { Exchange } from '../../src/proxy/exchange.js';
import { Batch } from '../../src/proxy/batch.js';
import { UpstreamPool, type Conn } from '../../src/proxy/pool.js';

const SECRET = '/var/lib/rootbox/servers/srv_hidden/rootfs is gone';

let app: NetServer;
let front: Server;
let pool: UpstreamPool;
const logs: Record<string, unknown>[] = [];
/** The error the next request's app connection fails with, once the app has its request. */
let nextError: Error = new Error('unset');
const appSockets = new Set<Socket>();

test.before(async () => {
  app = createNetServer((s) => {
    appSockets.add(s);
    s.on('close', () => appSockets.delete(s));
    s.on('error', () => {});
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const upstream = { host: '127.0.0.1', port: (app.address() as AddressInfo).port };
  pool = new UpstreamPool({ maxSockets: 4, connectTimeout: 2000, activeTimeout: 5000, idleTimeout: 4000 });
  const acquire = pool.acquire.bind(pool);
  // the app's side receives the request head, then our side of that connection fails
  pool.acquire = (up, fresh, source, give) =>
    acquire(up, fresh, source, (c: Conn) => {
      give(c);
      const err = nextError;
      const fail = () => c.sock.destroy(err);
      if (c.sock.connecting) c.sock.once('connect', () => setTimeout(fail, 50));
      else setTimeout(fail, 50);
    });
  const log = createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) });
  front = createServer((req, res) => {
    const info = { host: 'x.rbx.test', scheme: 'http' as const, requestId: 'req_exchange_test', ip: '127.0.0.1' };
    new Exchange(pool, req, res, upstream, info, { serverId: 'srv_test' }, { log, batch: new Batch() }).start();
  });
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
});

test.after(async () => {
  pool?.close();
  for (const s of appSockets) s.destroy();
  await new Promise((r) => front?.close(r));
  await new Promise((r) => app?.close(r));
});

function get(): Promise<{ status: number; body: Record<string, string> }> {
  return new Promise((resolve, reject) => {
    const port = (front.address() as AddressInfo).port;
    const r = request({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    r.on('error', reject);
    r.end();
  });
}

test('an app connection failing with an error that has no code answers 502 without the error message; the log has it', async () => {
  nextError = new Error(SECRET);
  const r = await get();
  assert.is(r.status, 502);
  assert.is(r.body.error, 'bad_gateway');
  assert.is(r.body.request_id, 'req_exchange_test');
  assert.not.ok(JSON.stringify(r.body).includes('/var/lib'), `the 502 body shows the error message: ${JSON.stringify(r.body)}`);
  assert.not.ok(JSON.stringify(r.body).includes('srv_hidden'), JSON.stringify(r.body));
  assert.ok(r.body.detail.includes('connection error'), r.body.detail);
  assert.ok(
    logs.some((l) => l.msg === 'forward failed' && JSON.stringify(l).includes('srv_hidden')),
    'the message is logged for the operator',
  );
});

test('an app connection failing with a socket error code names the code in the 502', async () => {
  nextError = Object.assign(new Error(`read ECONNRESET ${SECRET}`), { code: 'ECONNRESET' });
  const r = await get();
  assert.is(r.status, 502);
  assert.is(r.body.error, 'bad_gateway');
  assert.ok(r.body.detail.includes('(ECONNRESET)'), r.body.detail);
  assert.not.ok(JSON.stringify(r.body).includes('/var/lib'), JSON.stringify(r.body));
});

test('an error whose code is not an error code (free text) is not shown either', async () => {
  nextError = Object.assign(new Error('x'), { code: `${SECRET}` });
  const r = await get();
  assert.is(r.status, 502);
  assert.not.ok(JSON.stringify(r.body).includes('/var/lib'), JSON.stringify(r.body));
});

test.run();
