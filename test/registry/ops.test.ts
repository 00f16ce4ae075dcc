// The operator's commands in cluster mode against a real PostgreSQL and two daemons (process
// runtime): `servers list --cluster` lists every host's placements from the registry, plain
// `servers list` still lists this host's own; `status` shows the registry (reachable, schema,
// this host's lease, hosts up) in its parts and its own section, the same facts in both, with
// the daemon running and stopped, and says so when the registry is down; `cluster status` counts
// each host's servers; doctor checks this host's lease while its daemon runs and the clock's
// skew from the registry's. The operator commands run in this process (adminMain, its output
// captured) but for one of each kind through bin/rootbox, as an operator runs them (the bundle,
// its dispatch); doctor runs through bin/rootbox.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // what is tested here needs no container
import { rmSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KNOWN_VERSION, registryChecks, RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { freePort } from '../helpers/ports.js';
import { run } from '../helpers/run.js';
import { initRegistry } from '../helpers/cluster.js';
import { adminCli } from '../helpers/admincli.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;

const opts = (host: string) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
});
const env = (d: TestDaemon, host: string) => ({
  ...process.env,
  ROOTBOX_REGISTRY: pg.url,
  ROOTBOX_HOST_NAME: host,
  ROOTBOX_DATA_DIR: d.dataDir,
  ROOTBOX_CLUSTER_CONNECT_TIMEOUT: '500ms',
});
/** bin/rootbox `args` as the operator runs it, for host `host` of daemon `d`'s data dir. */
const binCli = (d: TestDaemon, host: string, args: string[]) => run(bin, args, { env: env(d, host) });
/** The same operator command in this process (test/helpers/admincli.ts). */
const cli = (d: TestDaemon, host: string, args: string[]) => adminCli(args, env(d, host));
const create = async (d: TestDaemon, sub: string) => {
  const r = await send(d.http, 'api.localhost', 'POST', '/create', { body: { subdomains: [sub] } });
  assert.is(r.status, 200, r.text);
  return r.json as { id: string; account_id?: string };
};
const json = async <T>(p: Promise<{ code: number | null; stdout: string; stderr: string }>): Promise<T> => {
  const r = await p;
  assert.is(r.code, 0, r.stderr + r.stdout);
  return JSON.parse(r.stdout) as T;
};

interface Placement {
  host: string;
  slug: string;
  server_id: string;
  epoch: number;
  account_id: string;
}
interface Facts {
  reachable: boolean;
  schema: number | null;
  host: string;
  lease: string | null;
  lease_left_s: number | null;
  hosts_up: number | null;
  hosts_total: number | null;
  servers_here: number | null;
}
interface Status {
  daemon: { running: boolean; parts?: Record<string, Record<string, unknown>> };
  registry: Facts | null;
}

test.before(async () => {
  pg = await startPostgres();
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(p);
  await p.end();
  a = await startTestDaemon(opts('host-a'));
  b = await startTestDaemon(opts('host-b'));
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await pg?.stop();
});

test('servers list --cluster lists every host’s placements from the registry; plain servers list stays this host’s', async () => {
  const one = await create(a, 'ops-one');
  const two = await create(a, 'ops-two');
  const three = await create(b, 'ops-three');
  const doc = await json<{ placements: Placement[] }>(cli(a, 'host-a', ['servers', 'list', '--cluster', '--json']));
  const got = doc.placements.map((p) => `${p.host} ${p.slug} ${p.server_id} ${p.epoch}`).sort();
  assert.equal(got, [`host-a ops-one ${one.id} 1`, `host-a ops-two ${two.id} 1`, `host-b ops-three ${three.id} 1`].sort());
  const account = doc.placements.find((p) => p.server_id === three.id)!.account_id;
  assert.match(account, /^acc_/);
  const only = await json<{ placements: Placement[] }>(cli(a, 'host-a', ['servers', 'list', '--cluster', '--account', account, '--json']));
  assert.equal(
    only.placements.map((p) => p.server_id),
    [three.id],
  );
  const human = await binCli(b, 'host-b', ['servers', 'list', '--cluster']);
  assert.match(human.stdout, /HOST\s+SLUG\s+SERVER\s+EPOCH\s+ACCOUNT/);
  assert.match(human.stdout, new RegExp(`host-b\\s+ops-three\\s+${three.id}\\s+1\\s+${account}`));
  assert.not.ok(human.stdout.includes(pg.password));
  const local = await json<{ servers: { id: string }[] }>(cli(a, 'host-a', ['servers', 'list', '--json']));
  assert.equal(local.servers.map((s) => s.id).sort(), [one.id, two.id].sort());
});

test('cluster status counts each host’s servers, also through the README’s multi-host URL form', async () => {
  const doc = await json<{ hosts: { name: string; up: boolean; servers: number }[] }>(cli(a, 'host-a', ['cluster', 'status', '--json']));
  assert.equal(
    doc.hosts.map((h) => `${h.name} ${h.up} ${h.servers}`),
    ['host-a true 2', 'host-b true 1'],
  );
  assert.match((await cli(a, 'host-a', ['cluster', 'status'])).stdout, /HOST\s+STATE\s+LEASE\s+SERVERS\s+ADVERTISE[\s\S]*host-b\s+up\s+[\d.]+ s left\s+1\s/);
});

test('status shows the registry in its parts and its own section, the same facts in both', async () => {
  const s = await json<Status>(binCli(a, 'host-a', ['status', '--json']));
  assert.ok(s.daemon.running);
  const r = s.registry!;
  assert.equal(
    { ...r, lease_left_s: null },
    {
      ...r,
      reachable: true,
      schema: KNOWN_VERSION,
      host: 'host-a',
      lease: 'running',
      lease_left_s: null,
      hosts_up: 2,
      hosts_total: 2,
      servers_here: 2,
    },
  );
  assert.ok(r.lease_left_s! > 0 && r.lease_left_s! <= 3, String(r.lease_left_s));
  const part = s.daemon.parts!.registry;
  assert.equal(part, { up: true, reachable: r.reachable, schema: r.schema, lease: r.lease, hosts_up: r.hosts_up });
  const human = (await cli(a, 'host-a', ['status'])).stdout;
  assert.match(human, new RegExp(`registry \\(reachable true, schema ${KNOWN_VERSION}, lease running, hosts_up 2\\)`));
  assert.match(
    human,
    new RegExp(
      `registry: postgres://rootbox:\\*\\*\\*@[^ ]+ reachable, schema ${KNOWN_VERSION} \\(this rootbox: ${KNOWN_VERSION}\\); host host-a lease running \\([\\d.]+ s left\\); 2 of 2 hosts up; 2 servers placed here`,
    ),
  );
  assert.not.ok(human.includes(pg.password));
});

test('doctor checks this host’s lease while its daemon runs, and the clock against the registry’s', async () => {
  const doc = await binCli(a, 'host-a', ['doctor']);
  assert.match(doc.stdout, /ok\s+cluster host lease\s+host-a registered \(127\.0\.0\.1:\d+\), lease [\d.]+ s left/);
  assert.match(doc.stdout, /ok\s+cluster clock\s+this host's clock is \d+ ms (ahead of|behind) the registry's/);
  const c = { registry: pg.url, host: 'host-a', lease: 3000, connectTimeout: 1000, statementTimeout: 2000 };
  const skewed = await registryChecks(c, { daemonRunning: true, now: () => Date.now() + 30_000 });
  const clock = skewed.find((x) => x.name === 'cluster clock')!;
  assert.is(clock.ok, false);
  const ahead = Number(/this host's clock is (\d+) ms ahead of the registry's/.exec(clock.detail)?.[1]);
  assert.ok(ahead > 29_000 && ahead < 31_000, clock.detail);
  // a host whose daemon runs but whose row is missing (never registered, or another registry)
  const gone = await registryChecks({ ...c, host: 'host-nowhere' }, { daemonRunning: true });
  assert.equal(
    gone.filter((x) => !x.ok).map((x) => `${x.name} ${x.required}: ${x.detail}`),
    ['cluster host lease true: host-nowhere is not registered although its daemon runs'],
  );
});

test('with the daemon stopped status reads the registry itself: this host’s lease runs on while its servers do; with the registry down it says so', async () => {
  // the daemon stops as in production (its data dir stays), then the test removes what it left
  const left = b;
  b = undefined as unknown as TestDaemon;
  const ids = left.daemon.runtime.list().map((x) => x.id);
  await left.daemon.stop();
  try {
    // its server still runs (containers outlive the daemon): the lease is kept, not released, so
    // nobody recovers a server that runs (issue 38 H1; the fence watchdog ends it if the daemon stays away)
    assert.is(await pg.sql(`SELECT lease_until > now() FROM hosts WHERE name = 'host-b'`), 't', 'the lease not released at the stop');
    const s = await json<Status>(cli(left, 'host-b', ['status', '--json']));
    assert.is(s.daemon.running, false);
    // what status reads of the registry: running until the kept lease lapses (3 s), lapsed after
    const up = s.registry?.lease === 'running' ? 2 : 1;
    assert.equal([s.registry?.reachable, s.registry?.hosts_up, s.registry?.servers_here], [true, up, 1]);
    assert.ok(['running', 'lapsed'].includes(String(s.registry?.lease)), String(s.registry?.lease));
  } finally {
    for (const id of ids) await left.daemon.runtime.delete(id).catch(() => {});
    rmSync(left.dataDir, { recursive: true, force: true });
  }
  await pg.halt();
  try {
    const down = await json<Status>(cli(a, 'host-a', ['status', '--json']));
    assert.is(down.registry?.reachable, false);
    assert.is(down.daemon.parts!.registry.reachable, false);
    assert.match(String(down.daemon.parts!.registry.problems), /./);
    assert.match((await cli(a, 'host-a', ['status'])).stdout, /registry: postgres:\/\/rootbox:\*\*\*@\S+ NOT reachable/);
  } finally {
    await pg.start();
  }
});

test.run();
