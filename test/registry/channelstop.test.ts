// A host's stop is not held by a channel peer: a cluster member that got an answer and closed its
// session without reading the answer's body keeps its side of the connection open; the owner's
// channel still stops within its grace (its sessions and their sockets destroyed), where it used
// to wait for that peer forever.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // servers are plain processes...
process.env.ROOTBOX_TEST_PROCESS_APPS = '1'; // ...whose apps listen on port 80 of an address of their own
import { chmodSync, writeFileSync } from 'node:fs';
import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { issueIdentity } from '../../src/channel/index.js';
import { loadConfig } from '../../src/config/index.js';
import { RegistryCa, RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { registerMember, TEST_CLUSTER_TOKEN, testKeys } from '../helpers/cluster.js';

let pg: TestPostgres;
let a: TestDaemon | undefined;
let peer: ClientHttp2Session | undefined;

test.before(async () => {
  pg = await startPostgres();
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN } } });
  const out: string[] = [];
  assert.is(await clusterCommand(cfg, 'init', {}, { out: (s) => out.push(s), err: (s) => out.push(s) }), 0, out.join('\n'));
});
test.after(async () => {
  peer?.destroy();
  await a?.stop();
  await pg?.stop();
});

test("a peer that leaves an answer unread does not hold the owner's stop beyond the channel's grace", async () => {
  const port = await freePort();
  a = await startTestDaemon({
    publicIp: '127.0.0.1',
    cluster: { registry: pg.url, host: 'host-a', listen: `127.0.0.1:${port}`, advertise: `127.0.0.1:${port}`, lease: '3s' },
  });
  const made = await send(a.http, 'api.localhost', 'POST', '/create', { body: { subdomains: ['held'] } });
  assert.is(made.status, 200, made.text);
  const id = made.json.id as string;
  const root = join(a.daemon.runtime.get(id)!.rootfs, 'root');
  writeFileSync(join(root, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(root, 'run.sh'), 0o755);
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  const pair = (await new RegistryCa(pool, testKeys()).load())!;
  await pool.end();
  const member = issueIdentity(pair, 'host-x');
  await registerMember(pg, member); // a host of the registry with the key it registered
  const epoch = String(a.daemon.registry!.placements.byServer(id)!.epoch);
  const status = await new Promise<number>((resolve, reject) => {
    const s = (peer = h2connect(`https://127.0.0.1:${port}`, { ca: pair.certPem, servername: 'host-a', cert: member.cert, key: member.key }));
    s.on('error', reject);
    const req = s.request({
      ':path': '/',
      ':authority': 'held.localhost',
      'x-rootbox-site': 'held.localhost',
      'x-rootbox-server': id,
      'x-rootbox-epoch': epoch,
      'x-rootbox-hops': '1',
    });
    req.on('response', (h) => {
      resolve(Number(h[':status']));
      s.close(); // graceful: waits for the stream, whose body is never read
    });
    req.on('error', reject);
    req.end();
  });
  assert.is(status, 200);
  const t0 = performance.now();
  const d = a;
  const stopped = d.stop().then(() => performance.now() - t0);
  let late: ReturnType<typeof setTimeout> | undefined;
  const ms = await Promise.race([stopped, new Promise<undefined>((r) => (late = setTimeout(() => r(undefined), 10_000)))]);
  clearTimeout(late);
  if (ms === undefined) {
    peer?.destroy(); // lets the stop end, so this process does too
    await stopped;
  }
  a = undefined;
  assert.ok(ms !== undefined, 'the stop still ran 10 s later, held by the peer');
  console.log(`   (stopped in ${Math.round(ms!)} ms)`);
  assert.ok(ms! < 6000, `${ms} ms`);
});

test.run();
