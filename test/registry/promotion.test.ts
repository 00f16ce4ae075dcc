// The operator's one-shot commands after a real failover, as the README's guide does it (the
// contrib script's promote step): the primary killed, its synchronous standby promoted, and the
// registry URL naming the dead primary first. `cluster status`, `servers list --cluster`,
// `cluster init` and `doctor`, run as the daemon's own CLI with a test daemon's env, find the
// promoted standby the way libpq does with target_session_attrs=read-write (the hosts in order,
// the first that takes writes), with and without that parameter in the URL.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // what is tested here needs no container
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { migrate, RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, startStandby, type TestPostgres, type TestStandby } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
let primary: TestPostgres;
let standby: TestStandby;
let d: TestDaemon | undefined;
let url: string;

test.before(async () => {
  primary = await startPostgres();
  standby = await startStandby(primary, 's1');
  url = `postgres://rootbox:${primary.password}@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres`;
  const pool = new RegistryPool({ url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  try {
    await migrate(pool);
  } finally {
    await pool.end();
  }
});
test.after(async () => {
  await d?.stop();
  await standby?.stop();
  await primary?.stop();
});

const cli = (registry: string, args: string[]) =>
  run(bin, args, {
    env: { ...process.env, ROOTBOX_REGISTRY: registry, ROOTBOX_HOST_NAME: 'host-a', ROOTBOX_DATA_DIR: d!.dataDir, ROOTBOX_CLUSTER_CONNECT_TIMEOUT: '500ms' },
  });

test('after the guide’s promotion, cluster status, servers list --cluster, cluster init and doctor reach the promoted standby with the dead primary first in the URL', async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    cluster: { registry: url, host: 'host-a', lease: '3s', connectTimeout: '500ms', statementTimeout: '2s' },
  });
  const r = await send(d.http, 'api.localhost', 'POST', '/create', { body: { subdomains: ['promoted'] } });
  assert.is(r.status, 200, r.text);
  const id = (r.json as { id: string }).id;

  await primary.kill();
  await standby.promote();
  assert.is(await standby.sql('SHOW synchronous_standby_names'), '', 'the promoted primary waits for no standby');

  for (const registry of [url, `${url}?target_session_attrs=read-write`]) {
    const status = await cli(registry, ['cluster', 'status', '--json']);
    assert.is(status.code, 0, status.stderr + status.stdout);
    const hosts = (JSON.parse(status.stdout) as { hosts: { name: string }[] }).hosts;
    assert.ok(
      hosts.some((h) => h.name === 'host-a'),
      status.stdout,
    );

    const list = await cli(registry, ['servers', 'list', '--cluster', '--json']);
    assert.is(list.code, 0, list.stderr + list.stdout);
    const placements = (JSON.parse(list.stdout) as { placements: { server_id: string; slug: string; host: string }[] }).placements;
    assert.ok(
      placements.some((p) => p.server_id === id && p.slug === 'promoted' && p.host === 'host-a'),
      list.stdout,
    );

    const init = await cli(registry, ['cluster', 'init']);
    assert.is(init.code, 0, init.stderr + init.stdout);

    const doctor = await cli(registry, ['doctor']);
    assert.not.match(doctor.stdout + doctor.stderr, /cannot be reached|NOT reachable/, doctor.stdout + doctor.stderr);
  }
  // the promoted standby took the writes: the new primary's own statement, not a stale read
  assert.is(await standby.sql('SELECT pg_is_in_recovery()'), 'f');
});

test('a URL whose target_session_attrs is not libpq’s is refused by name', async () => {
  const bad = await cli(`${url}?target_session_attrs=writable`, ['cluster', 'status']);
  assert.is.not(bad.code, 0);
  assert.match(bad.stderr + bad.stdout, /target_session_attrs=writable/);
});

test.run();
