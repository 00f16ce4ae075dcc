// Stalled uploads forwarded through another host do not starve the owner's app (issue 35 item 3):
// two daemons sharing a real PostgreSQL registry, a server on A whose app is a process, 300
// uploads sent to B from one address that declare 1 MB, send 1 KiB and stall. B streams them to A
// at once (cluster.forwardRetryBody 0: no retry copy to wait for). A counts them against the
// client's address the channel carries, not against B: that address holds its share of A's
// connections to the app (proxy.maxSocketsPerSource) with as many waiting, the rest get 429 at
// once; a GET through B from another address is answered at once; the stalled ones end with 408
// after proxy.bodyIdleTimeout.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // servers are plain processes...
process.env.ROOTBOX_TEST_PROCESS_APPS = '1'; // ...whose apps listen on port 80 of an address of their own
import { chmodSync, writeFileSync } from 'node:fs';
import { request as h1 } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { clusterOpts, startClusterRegistry } from './fixtures/twohosts.js';

const UPLOADS = 300;
const SHARE = 64; // proxy.maxSocketsPerSource's default
const IDLE = 3000; // proxy.bodyIdleTimeout here
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;

async function host(name: string): Promise<TestDaemon> {
  const o = clusterOpts(pg, name, await freePort());
  return startTestDaemon({
    ...o,
    cluster: { ...o.cluster, forwardRetryBody: 0 },
    // 300 uploads from one address on HTTP/1.1: more connections than the edge's default per address
    http: { host: '127.0.0.1', port: 0, maxConnectionsPerAddress: 1000 },
    proxy: { bodyIdleTimeout: `${IDLE}ms` },
  });
}

test.before(async () => {
  pg = await startClusterRegistry();
  a = await host('host-a');
  b = await host('host-b');
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

function ask(d: TestDaemon, path: string, from: string, ms: number): Promise<{ status: number; body: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = h1({ host: '127.0.0.1', port: d.http, path, agent: false, localAddress: from, headers: { host: 'fairfwd.localhost' } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body, ms: performance.now() - t0 }));
    });
    req.setTimeout(ms, () => req.destroy(new Error(`GET ${path} from ${from} got no answer within ${ms} ms`)));
    req.on('error', reject);
    req.end();
  });
}

test('300 stalled uploads from one address through B: another address gets the app on A at once; the stalled ones end 429 or 408', async () => {
  const r = await send(a.http, 'api.localhost', 'POST', '/create', { body: { subdomains: ['fairfwd'] }, from: '127.0.9.1' });
  assert.is(r.status, 200, r.text);
  const root = join(a.daemon.runtime.get(r.json.id)!.rootfs, 'root');
  writeFileSync(join(root, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(root, 'run.sh'), 0o755);
  await until('the app answers through B', async () => (await ask(b, '/hello', '127.0.72.1', 5000)).status === 200);

  const answers: string[] = [];
  const socks: Socket[] = [];
  for (let i = 0; i < UPLOADS; i++) {
    const s = connect({ port: b.http, host: '127.0.0.1', localAddress: '127.0.70.1' });
    let got = '';
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('error', () => {});
    s.on('close', () => answers.push(got));
    s.write(`POST /upload HTTP/1.1\r\nhost: fairfwd.localhost\r\ncontent-length: 1000000\r\n\r\n`);
    s.write(Buffer.alloc(1024, 7)); // and then nothing more
    socks.push(s);
  }
  const status = (t: string) => Number(/^HTTP\/1\.1 (\d+)/.exec(t)?.[1] ?? 0);
  try {
    // the uploads beyond the share and its queue are answered 429 by A, through B
    await until('the uploads beyond the share to be refused', () => answers.filter((t) => status(t) === 429).length >= UPLOADS - 2 * SHARE, 20_000).catch(
      () => undefined, // today nothing is refused: the GET below shows what that costs
    );
    const other = await ask(b, '/next', '127.0.71.1', 2000);
    assert.is(other.status, 200, other.body);
    assert.ok(other.ms < 2000, `${other.ms} ms`);
    const refused = answers.filter((t) => status(t) === 429);
    assert.is(refused.length, UPLOADS - 2 * SHARE);
    for (const t of refused) assert.match(t, /too_many_app_requests/);
    for (const t of refused) assert.match(t, /\r\nretry-after: 1\r\n/i);

    // the stalled ones end with 408 after the idle timeout (the queued ones after a second one)
    await until('every stalled upload to be answered', () => answers.length >= UPLOADS, 4 * IDLE + 10_000);
    const stalled = answers.filter((t) => status(t) === 408);
    assert.is(
      stalled.length,
      2 * SHARE,
      answers
        .filter((t) => status(t) !== 429 && status(t) !== 408)
        .slice(0, 2)
        .join('\n---\n'),
    );
    for (const t of stalled) assert.match(t, /body_timeout/);
  } finally {
    for (const s of socks) s.destroy();
  }
});

test.run();
