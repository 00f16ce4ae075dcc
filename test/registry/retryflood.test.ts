// A flood of stalled uploads forwarded through a host (issue 35 item 3): two daemons sharing a real
// PostgreSQL registry, a server on A with an app, clients that send B 1 MiB of a body one byte
// longer and then stall. B keeps request bodies for a retry only within its budget — per source
// (an IPv4 address, an IPv6 /64: cluster.forwardRetryPerSource) and in total
// (cluster.forwardRetryTotal) — and streams the others to A at once without a copy: what B holds
// stays within the bounds (its own count and the process's buffers), an upload from a source over
// its bound still reaches the app whole, B's next requests to the same server are answered at
// once, and once the stalled clients leave nothing stays held.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // servers are plain processes...
process.env.ROOTBOX_TEST_PROCESS_APPS = '1'; // ...whose apps listen on port 80 of an address of their own
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import { request as h1 } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { loadConfig } from '../../src/config/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { TEST_CLUSTER_TOKEN } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

const MiB = 1024 * 1024;
/** The defaults of cluster.forwardRetryPerSource and cluster.forwardRetryTotal. */
const PER_SOURCE = 8 * MiB;
const TOTAL = 64 * MiB;
/** One read of a socket: a body's hold stops within one of its bound. */
const READ = 64 * 1024;

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
const opts = (host: string, listen: number) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, listen: `127.0.0.1:${listen}`, advertise: `127.0.0.1:${listen}`, lease: '3s', connectTimeout: '500ms' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
  // the uploads B streams on stall at A's app too: A's pool to one app (256 by default) is A's
  // own bound, not what this test is about
  proxy: { maxSocketsPerServer: 1024 },
});

test.before(async () => {
  pg = await startPostgres();
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN } } });
  const out: string[] = [];
  assert.is(await clusterCommand(cfg, 'init', {}, { out: (s) => out.push(s), err: (s) => out.push(s) }), 0, out.join('\n'));
  a = await startTestDaemon(opts('host-a', await freePort()));
  b = await startTestDaemon(opts('host-b', await freePort()));
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

interface Got {
  status: number;
  body: string;
  ms: number;
}

function ask(d: TestDaemon, path: string, o: { body?: Buffer; from?: string } = {}): Promise<Got> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = h1(
      {
        host: '127.0.0.1',
        port: d.http,
        method: o.body ? 'POST' : 'GET',
        path,
        agent: false,
        localAddress: o.from,
        headers: { host: 'flood.localhost', ...(o.body ? { 'content-length': String(o.body.length) } : {}) },
      },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body, ms: performance.now() - t0 }));
      },
    );
    req.on('error', reject);
    req.end(o.body);
  });
}

const stalled: Socket[] = [];
const part = Buffer.alloc(MiB, 7);
/** `n` uploads from `from` that send 1 MiB of a body one byte longer, then nothing. */
function stall(from: string, n: number): void {
  for (let i = 0; i < n; i++) {
    const s = connect({ port: b.http, host: '127.0.0.1', localAddress: from });
    s.on('error', () => {});
    s.write(`POST /upload HTTP/1.1\r\nhost: flood.localhost\r\ncontent-length: ${MiB + 1}\r\n\r\n`);
    s.write(part);
    stalled.push(s);
  }
}

/** The process's buffers once the bytes in flight have arrived (the uploads streamed on pass
 *  through B and A to the app: two readings in a row alike). */
async function settled(): Promise<number> {
  let last = buffers();
  return until(
    'the buffers settle',
    () => {
      const now = buffers();
      const same = Math.abs(now - last) < MiB;
      last = now;
      return same && now;
    },
    30_000,
    300,
  );
}

/** Bytes B says it keeps for a retry (0 where it keeps no count), in total and for one address. */
const held = () => b.daemon.channel?.retries?.held ?? 0;
const heldBy = (ip: string) => b.daemon.channel?.retries?.heldBy(ip) ?? 0;
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** Bytes of buffers this process holds (daemons and clients); `collect`: what stays after a full
 *  garbage collection (buffers already dropped do not count). */
const buffers = (collect = true) => (collect && gc(), process.memoryUsage().arrayBuffers);

test('stalled uploads from many addresses: retry copies within the bounds, the rest streamed, the next request answered at once', async () => {
  const r = await send(a.http, 'api.localhost', 'POST', '/create', { body: { subdomains: ['flood'] }, from: '127.0.9.1' });
  assert.is(r.status, 200, r.text);
  const root = join(a.daemon.runtime.get(r.json.id)!.rootfs, 'root');
  writeFileSync(join(root, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(root, 'run.sh'), 0o755);
  await until('the app answers through B', async () => (await ask(b, '/hello')).status === 200);
  const before = buffers();

  // one address: its bound holds while the host's is far
  stall('127.0.60.1', 40);
  await until('B holds what one source may', () => heldBy('127.0.60.1') >= PER_SOURCE - READ || buffers(false) - before > 3 * PER_SOURCE, 60_000, 200);
  assert.ok(heldBy('127.0.60.1') <= PER_SOURCE, `one source holds ${heldBy('127.0.60.1')} bytes`);
  const one = (await settled()) - before;
  assert.ok(one < 3 * PER_SOURCE, `40 stalled uploads from one address grew the buffers by ${(one / MiB).toFixed(0)} MiB`);

  // nine more: the host's bound holds
  for (let i = 2; i <= 10; i++) stall(`127.0.60.${i}`, 40);
  await until('B holds what it may', () => held() >= TOTAL - READ || buffers(false) - before > 4 * TOTAL, 120_000, 200);
  // every upload is in: the app has the ones streamed to it (nothing more comes)
  const sources = Array.from({ length: 10 }, (_, i) => `127.0.60.${i + 1}`);
  for (const ip of sources) assert.ok(heldBy(ip) <= PER_SOURCE, `${ip} holds ${heldBy(ip)} bytes`);
  assert.ok(held() <= TOTAL, `B holds ${held()} bytes`);
  const all = (await settled()) - before;
  assert.ok(all < 2 * TOTAL, `400 stalled uploads from 10 addresses grew the buffers by ${(all / MiB).toFixed(0)} MiB`);

  // an upload from a source at its bound streams to the app, whole, without a copy
  const big = randomBytes(3 * MiB);
  const up = await ask(b, '/upload', { body: big, from: '127.0.60.1' });
  assert.is(up.status, 200, up.body);
  assert.is(JSON.parse(up.body).sha256, createHash('sha256').update(big).digest('hex'));
  assert.ok(heldBy('127.0.60.1') <= PER_SOURCE);

  // B's next requests to the same server, from elsewhere: answered at once
  for (const o of [{}, { body: Buffer.from('hi') }]) {
    const next = await ask(b, '/next', { ...o, from: '127.0.61.1' });
    assert.is(next.status, 200, next.body);
    assert.ok(next.ms < 2000, `${next.ms} ms`);
  }

  // the stalled clients leave: nothing stays held
  for (const s of stalled.splice(0)) s.destroy();
  await until('B holds nothing', () => held() === 0, 10_000);
});

test.run();
