// The operator's one-shot commands after a real failover, as the README's guide does it (the
// contrib script's promote step): the primary killed, its synchronous standby promoted, and the
// registry URL naming the dead primary first. `cluster status`, `servers list --cluster`,
// `cluster init` and `doctor`, run as the daemon's own CLI with a test daemon's env, find the
// promoted standby the way libpq does with target_session_attrs=read-write (the hosts in order,
// the first that takes writes), with and without that parameter in the URL. A daemon restarted
// right after the promotion, the dead primary first in its URL and not answering (a machine that
// is gone: its connect times out), listens at once: edge and SSH within 2 s. The commands but for
// one cluster status, doctor and the refusal run in this process (test/helpers/admincli.ts).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // what is tested here needs no container
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryPool } from '../../src/registry/index.js';
import { initRegistry, TEST_CLUSTER_TOKEN } from '../helpers/cluster.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, startStandby, type TestPostgres, type TestStandby } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { adminCli } from '../helpers/admincli.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
let primary: TestPostgres;
let standby: TestStandby;
let d: TestDaemon | undefined;
let id: string;
let url: string;
const home = mkdtempSync(join(tmpdir(), 'rbx-promotion-'));
const held: Socket[] = [];
// the dead primary's address: takes connections and never answers (a connect there times out)
const blackHole = createServer((s) => held.push(s));

test.before(async () => {
  primary = await startPostgres();
  standby = await startStandby(primary, 's1');
  url = `postgres://rootbox:${primary.password}@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres`;
  const pool = new RegistryPool({ url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  try {
    await initRegistry(pool); // the schema and the tests' cluster token, as `rootbox cluster init` makes them
  } finally {
    await pool.end();
  }
});
test.after(async () => {
  await d?.stop();
  for (const s of held) s.destroy();
  blackHole.close();
  await standby?.stop();
  await primary?.stop();
  rmSync(home, { recursive: true, force: true });
});

const cluster = { registry: '', host: 'host-a', lease: '3s', statementTimeout: '2s' }; // connectTimeout: the default

test('a daemon restarted right after the promotion listens at once (edge and SSH within 2 s) with the dead primary first in its URL', async () => {
  const first = await startTestDaemon({ dataDir: home, publicIp: '127.0.0.1', cluster: { ...cluster, registry: url } });
  await first.daemon.stop(); // the restart: its data dir stays

  await primary.kill();
  await standby.promote();
  await new Promise<void>((resolve) => blackHole.listen(primary.port, '127.0.0.1', resolve));

  const t0 = performance.now();
  d = await startTestDaemon({ dataDir: home, publicIp: '127.0.0.1', cluster: { ...cluster, registry: url } });
  const ssh = await new Promise<string>((resolve, reject) => {
    const s = connect(d!.daemon.ssh.port, '127.0.0.1');
    s.once('data', (b) => (resolve(b.toString()), s.destroy()));
    s.once('error', reject);
  });
  const edge = await send(d.http, 'api.localhost', 'GET', '/');
  const took = performance.now() - t0;
  assert.match(ssh, /^SSH-2\.0-/);
  assert.ok(edge.status > 0);
  assert.ok(took < 2000, `listening after ${Math.round(took)} ms`);
});

const env = (registry: string) => ({
  ...process.env,
  ROOTBOX_REGISTRY: registry,
  ROOTBOX_HOST_NAME: 'host-a',
  ROOTBOX_DATA_DIR: home,
  ROOTBOX_CLUSTER_TOKEN: TEST_CLUSTER_TOKEN,
});
/** bin/rootbox as the operator runs it; `cli` the same operator command in this process. */
const binCli = (registry: string, args: string[]) => run(bin, args, { env: env(registry) });
const cli = (registry: string, args: string[]) => adminCli(args, env(registry));

test('after the guide’s promotion, cluster status, servers list --cluster, cluster init and doctor reach the promoted standby with the dead primary first in the URL', async () => {
  assert.is(await standby.sql('SHOW synchronous_standby_names'), '', 'the promoted primary waits for no standby');
  // the restarted daemon writes through the promoted standby
  const r = await send(d!.http, 'api.localhost', 'POST', '/create', { body: { subdomains: ['promoted'] } });
  assert.is(r.status, 200, r.text);
  id = (r.json as { id: string }).id;

  const [status, list, init, doctor] = await Promise.all([
    binCli(url, ['cluster', 'status', '--json']),
    cli(url, ['servers', 'list', '--cluster', '--json']),
    cli(url, ['cluster', 'init']),
    binCli(url, ['doctor']),
  ]);
  assert.is(status.code, 0, status.stderr + status.stdout);
  const hosts = (JSON.parse(status.stdout) as { hosts: { name: string; up: boolean }[] }).hosts;
  assert.ok(
    hosts.some((h) => h.name === 'host-a' && h.up),
    status.stdout,
  );
  assert.is(list.code, 0, list.stderr + list.stdout);
  const placements = (JSON.parse(list.stdout) as { placements: { server_id: string; slug: string; host: string }[] }).placements;
  assert.ok(
    placements.some((p) => p.server_id === id && p.slug === 'promoted' && p.host === 'host-a'),
    list.stdout,
  );
  assert.is(init.code, 0, init.stderr + init.stdout);
  assert.not.match(doctor.stdout + doctor.stderr, /cannot be reached|NOT reachable/, doctor.stdout + doctor.stderr);
  // the URL's own target_session_attrs, as libpq reads it
  for (const attrs of ['read-write', 'primary']) {
    const r = await cli(`${url}?target_session_attrs=${attrs}`, ['cluster', 'status', '--json']);
    assert.is(r.code, 0, r.stderr + r.stdout);
  }
  // the promoted standby took the writes: the new primary's own statement, not a stale read
  assert.is(await standby.sql('SELECT pg_is_in_recovery()'), 'f');
});

test('a URL whose target_session_attrs is not libpq’s is refused by name', async () => {
  const bad = await binCli(`${url}?target_session_attrs=writable`, ['cluster', 'status']);
  assert.is.not(bad.code, 0);
  assert.match(bad.stderr + bad.stdout, /target_session_attrs=writable/);
});

test.run();
