// A host restarted during a real failover listens at once (issue 36 item 6): the real daemon as a
// process with runc containers, in registry mode against a primary and its synchronous standby
// set up by the README guide's script (contrib/registry-cluster.sh), the registry URL naming the
// primary first. The primary is killed, the standby promoted (the guide's promote step), the
// primary's machine gone (its address takes connections and never answers), and the daemon
// SIGKILLed and started again right after the promotion, while the promoted standby is slow to
// take the host's registration (another session holds a lock on the hosts' table, so the first
// registry round trip lasts as long as the test says, not by timing luck): its edge (HTTP and
// HTTPS) and SSH accept connections within 2 s of the start, /healthz answers and the API says
// 503 registry_unavailable with Retry-After. Once the lock goes it finds the promoted standby
// within a bounded time (the hosts asked in order, the first that takes writes) and serves: the
// server's key works, the server made before the failover serves its page through the edge, and
// a create is placed through the new primary. The operator's CLI (`cluster status`,
// `servers list --cluster`) reaches the promoted standby with the dead primary first in the URL
// (issue 36 item 2).
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import pg from 'pg';
import { RegistryPool } from '../../src/registry/index.js';
import { initRegistry, TEST_CLUSTER_TOKEN } from '../helpers/cluster.js';
import { freePort } from '../helpers/ports.js';
import { startPostgres, startStandby, type TestPostgres, type TestStandby } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { sleep, until } from '../helpers/wait.js';
import { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get } from './fixtures/clients.js';
import { api } from './fixtures/twohosts.js';

const HOST = 'promo-host';
const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
let primary: TestPostgres;
let standby: TestStandby;
let d: ProcDaemon | undefined;
let url: string;
const ports = { http: 0, https: 0, ssh: 0 };
const edge = {
  get http() {
    return ports.http;
  },
};
const cliHome = mkdtempSync(join(tmpdir(), 'rbx-restartpromo-'));
const held: Socket[] = [];
// the dead primary's machine: takes connections and never answers (a connect there times out)
const blackHole = createServer((s) => void held.push(s.on('error', () => {})));

test.before(async () => {
  primary = await startPostgres();
  standby = await startStandby(primary, 's1');
  url = `postgres://rootbox:${primary.password}@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres`;
  const pool = new RegistryPool({ url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
  try {
    await initRegistry(pool);
  } finally {
    await pool.end();
  }
  for (const k of ['http', 'https', 'ssh'] as const) ports[k] = await freePort();
  d = new ProcDaemon({
    config: {
      http: { host: '127.0.0.1', port: ports.http },
      https: { host: '127.0.0.1', port: ports.https },
      ssh: { host: '127.0.0.1', port: ports.ssh },
      cluster: { registry: url, host: HOST, lease: '3s', connectTimeout: '3s', statementTimeout: '5s' },
      hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
    },
  });
  await d.start();
});
test.after(async () => {
  await d?.remove();
  for (const s of held) s.destroy();
  blackHole.close();
  await standby?.stop();
  await primary?.stop();
  rmSync(cliHome, { recursive: true, force: true });
});

/** Whether something accepts a TCP connection on 127.0.0.1:port now. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port }, () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });
}

/** The SSH server's banner. */
function banner(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    s.once('data', (b) => (resolve(b.toString()), s.destroy()));
    s.once('error', reject);
  });
}

const page = async (host: string) => (await get({ http: ports.http, https: 0, ca: '' }, host, '/')).body.toString();

let srv: { id: string; api_key: string };

test('before the failover: a server whose page the edge serves', async () => {
  const r = await api(edge, 'POST', '/create', { body: { subdomains: ['promo'] } });
  assert.is(r.status, 200, r.text);
  srv = r.json as { id: string; api_key: string };
  const w = await api(edge, 'PUT', `/servers/${srv.id}/files?path=/root/www/index.html`, {
    key: srv.api_key,
    body: 'served across the failover',
    headers: { 'content-type': 'application/octet-stream' },
  });
  assert.is(w.status, 200, w.text);
  await until('the edge serves the page', async () => (await page('promo.localhost')) === 'served across the failover', 30_000);
});

test('a daemon killed and started again right after the promotion listens within 2 s, then finds the promoted standby and serves', async () => {
  await primary.kill();
  await standby.promote();
  await new Promise<void>((resolve) => blackHole.listen(primary.port, '127.0.0.1', resolve));
  // the promoted standby slow to take this host's first write: another session holds a lock on
  // the hosts' table (SHARE: reads go on, the host's registration waits), so the registry's first
  // round trip is under way for as long as the test says, not by timing luck
  const lock = new pg.Client({ connectionString: standby.url });
  await lock.connect();
  await lock.query('BEGIN');
  await lock.query('LOCK TABLE hosts IN SHARE MODE');
  let locked = true;
  try {
    await d!.kill();
    const t0 = Date.now();
    const starting = d!.start(60_000);
    let failed: unknown;
    let started = 0;
    starting.then(
      () => (started = Date.now() - t0),
      (e) => (failed = e),
    );
    const at: Record<string, number> = {}; // when each listener first accepted a connection
    while (Object.keys(at).length < 3 && Date.now() - t0 < 15_000 && failed === undefined) {
      for (const [name, port] of Object.entries(ports)) if (at[name] === undefined && (await accepts(port))) at[name] = Date.now();
      await sleep(20);
    }
    assert.is(failed, undefined, String(failed));
    // the start: the daemon's first line, the registry's, logged before its first round trip (the
    // Node process's own start, loading the bundle, is not the daemon's doing and is left out)
    const line = d!.current().find((l) => l.msg === 'registry');
    assert.ok(line, 'the daemon logged its registry');
    const start = Date.parse(line.time);
    const ms = Object.fromEntries(Object.entries(at).map(([k, v]) => [k, v - start]));
    const seen = `${JSON.stringify(ms)} after its start, ${start - t0} ms after the spawn; joined ${started ? `${started} ms after the spawn` : 'not yet'}`;
    for (const name of ['http', 'https', 'ssh'])
      assert.ok(ms[name] !== undefined && ms[name] < 2000, `${name} listened ${ms[name] ?? 'more than 15000'} ms: ${seen}`);
    assert.match(await banner(ports.ssh), /^SSH-2\.0-/);
    // while its registration waits on the promoted standby: the health check answers, what needs the registry is 503 with Retry-After
    await until(
      'the registration to wait on the lock',
      async () =>
        Number(await standby.sql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE NOT l.granted AND c.relname = 'hosts'")) >= 1,
      10_000,
    );
    const health = await api(edge, 'GET', '/healthz');
    assert.is(health.status, 200, health.text);
    const early = await api(edge, 'GET', `/servers/${srv.id}`, { key: srv.api_key });
    assert.is(early.status, 503, early.text);
    assert.is((early.json as { error: string }).error, 'registry_unavailable');
    assert.ok(Number(early.headers['retry-after']) >= 1, `Retry-After: ${early.headers['retry-after']}`);
    await lock.query('ROLLBACK');
    locked = false;

    // within a bounded time: the host joined through the promoted standby (the dead primary first in its URL)
    await starting;
    assert.ok(started < 30_000, `joined after ${started} ms`);
  } finally {
    if (locked) await lock.query('ROLLBACK').catch(() => {});
    await lock.end();
  }
  const own = await api(edge, 'GET', `/servers/${srv.id}`, { key: srv.api_key });
  assert.is(own.status, 200, own.text);
  assert.is((own.json as { id: string }).id, srv.id);
  await until('the edge serves the page after the restart', async () => (await page('promo.localhost')) === 'served across the failover', 30_000);
  // it writes through the promoted standby: a new server's subdomain claimed and placed there
  const made = await api(edge, 'POST', '/create', { body: { subdomains: ['promo-after'] } });
  assert.is(made.status, 200, made.text);
  const id = (made.json as { id: string }).id;
  assert.is(await standby.sql(`SELECT host FROM placements WHERE server_id = '${id}'`), HOST);
  assert.is(await standby.sql('SELECT pg_is_in_recovery()'), 'f');
});

const cli = (args: string[]) =>
  run(bin, args, {
    env: {
      ...process.env,
      ROOTBOX_CONFIG: '',
      ROOTBOX_REGISTRY: url,
      ROOTBOX_HOST_NAME: HOST,
      ROOTBOX_DATA_DIR: cliHome,
      ROOTBOX_CLUSTER_TOKEN: TEST_CLUSTER_TOKEN,
    },
  });

test('after the promotion, cluster status and servers list --cluster reach the promoted standby with the dead primary first in the URL', async () => {
  const [status, list] = await Promise.all([cli(['cluster', 'status', '--json']), cli(['servers', 'list', '--cluster', '--json'])]);
  assert.is(status.code, 0, status.stderr + status.stdout);
  const hosts = (JSON.parse(status.stdout) as { hosts: { name: string; up: boolean }[] }).hosts;
  assert.ok(
    hosts.some((h) => h.name === HOST && h.up),
    status.stdout,
  );
  assert.is(list.code, 0, list.stderr + list.stdout);
  const placements = (JSON.parse(list.stdout) as { placements: { server_id: string; slug: string; host: string }[] }).placements;
  assert.ok(
    placements.some((p) => p.server_id === srv.id && p.slug === 'promo' && p.host === HOST),
    list.stdout,
  );
});

test.run();
