// One trust anchor per cluster (issue 36 item 5), with real daemons, a real PostgreSQL and node's
// TLS client: with the embedded default TLS, the CA file host A tells its clients to trust
// (tls/ca.pem) verifies host B's HTTPS certificates too, because every host takes the cluster's
// edge CA from the registry (the first host's own, offered) and writes it to its tls/ca.pem; the
// edge CA is not the channel's; its key is in no pg_dump of the registry; a host that started while
// the registry was down takes it as soon as the registry answers.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryCa, RegistryEdgeCa, RegistryPool } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { testKeys } from '../helpers/cluster.js';
import { clusterOpts, startTwoHosts, type TwoHosts } from './fixtures/twohosts.js';

let hosts: TwoHosts;
let pool: RegistryPool;
const more: TestDaemon[] = [];

const caOf = (d: TestDaemon) => readFileSync(join(d.dataDir, 'tls', 'ca.pem'), 'utf8');

/** A TLS handshake with `port` as `servername`, trusting only `ca`: whether the chain and the name verified. */
function handshake(ca: string, port: number, servername: string): Promise<{ authorized: boolean; error?: string }> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port, servername, ca, rejectUnauthorized: false }, () => {
      resolve({ authorized: s.authorized, error: s.authorizationError?.toString() });
      s.end();
    });
    s.on('error', (e) => resolve({ authorized: false, error: e.message }));
  });
}

/** pg_dump of the registry (schema and data, as a backup would take it). */
async function dump(): Promise<string> {
  const r = await run('/usr/lib/postgresql/15/bin/pg_dump', ['-h', '127.0.0.1', '-p', String(hosts.pg.port), '-U', 'rootbox', '-d', 'postgres'], {
    env: { ...process.env, PGPASSWORD: hosts.pg.password },
  });
  assert.is(r.code, 0, r.stderr);
  return r.stdout;
}

test.before(async () => {
  hosts = await startTwoHosts();
  pool = new RegistryPool({ url: hosts.pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
});
test.after(async () => {
  for (const d of more) await d.stop().catch(() => {});
  await pool?.end();
  await hosts?.stop();
});

test("host A's CA file verifies host B's HTTPS certificates, for the API name, the domain and a server's name", async () => {
  const { a, b } = hosts;
  const ca = caOf(a);
  assert.is(a.ca, ca, "the file A's start-up hint names");
  for (const name of ['api.localhost', 'localhost', 'blog.localhost']) {
    assert.equal(await handshake(ca, b.https, name), { authorized: true, error: undefined }, `B as ${name}`);
    assert.equal(await handshake(ca, a.https, name), { authorized: true, error: undefined }, `A as ${name}`);
  }
  assert.is(caOf(b), ca, "B's tls/ca.pem is the cluster's CA");
  // the registry's edge CA is A's, offered by the first host, and not the channel's CA
  const edge = (await new RegistryEdgeCa(pool, testKeys()).load())!;
  assert.is(edge.certPem, ca);
  assert.is.not(edge.certPem, (await new RegistryCa(pool, testKeys()).load())!.certPem, 'the channel CA is another');
});

test("the edge CA's key is in no pg_dump of the registry, in PEM, base64 or hex", async () => {
  const key = readFileSync(join(hosts.b.dataDir, 'tls', 'ca-key.pem'), 'utf8');
  assert.is(key, (await new RegistryEdgeCa(pool, testKeys()).load())!.keyPem, "B holds the cluster's key");
  const der = createPrivateKey(key).export({ type: 'pkcs8', format: 'der' });
  const forms = [...key.split('\n').filter((l) => l && !l.startsWith('-----')), der.toString('base64'), der.toString('hex')];
  const text = await dump();
  assert.ok(text.includes('cluster_secrets'), 'the dump has the registry');
  for (const f of forms) assert.not.ok(text.includes(f), `the dump holds the edge CA key (${f.slice(0, 24)}…)`);
});

test('a host started while the registry was down presents its own CA, then the cluster one once the registry answers', async () => {
  const { a, pg } = hosts;
  await pg.halt();
  const opts = clusterOpts(pg, 'host-c', await freePort());
  let c: TestDaemon;
  try {
    c = await startTestDaemon({ ...opts, cluster: { ...opts.cluster, certificatePoll: '200ms' } });
    more.push(c);
  } finally {
    await pg.start();
  }
  let last = await handshake(a.ca, c.https, 'api.localhost');
  await until('C presents the cluster CA', async () => (last = await handshake(a.ca, c.https, 'api.localhost')).authorized, 15_000, 20).catch(() => {});
  assert.equal(last, { authorized: true, error: undefined }, 'C is verified by A’s CA once the registry answers');
  assert.is(caOf(c), a.ca, "C's tls/ca.pem is the cluster's CA");
  assert.ok(
    c.logs.some((l) => String(l.msg).includes("the cluster's CA for HTTPS is not taken yet")),
    'C said it presented its own certificate meanwhile',
  );
});

test.run();
