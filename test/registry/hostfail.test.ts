// Host failure across two daemons sharing a real PostgreSQL registry: A in this process, B the
// real daemon as a child process with runc containers (ProcDaemon), so B can be SIGKILLed by its
// pid and started again on the same data dir. B killed: its servers answer through A with a fast
// 503 host_unavailable, A's API shows them `unavailable`, nothing meters them; B back: it
// reconciles with the registry (a server deleted meanwhile, its subdomain now another server's on
// A, is not resurrected), its servers serve again through A, the downtime is never charged and
// nothing is duplicated (placement, ledger periods, containers). Then an nftables partition
// between A and B's channel port: requests through A fail within the channel's timeouts (pinged
// every forwardConnectTimeout, answered within it; a peer that could not be reached fails its
// requests at once for that long), A's server list shows B's servers `unavailable` (B gives none),
// no placement changes, and once healed B serves through A again.
// Last, a clean stop of B charges its servers up to the stop (the next start opens new periods).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // A's servers are plain processes (B's are runc containers)
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get as request } from './fixtures/clients.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

/** The channel's connect and ping timeout of both hosts (cluster.forwardConnectTimeout). */
const CHANNEL_MS = 500;
const PARTITION = `rbxpart${process.pid}`;

let pg: TestPostgres;
let a: TestDaemon;
let b: ProcDaemon;
let bChannel = 0;
/** B's servers: one that lives through the failure, one deleted in the registry while B is down. */
let kept: { id: string; api_key: string };
let gone: { id: string; api_key: string };

const cluster = (host: string, port: number) => ({
  registry: pg.url,
  host,
  listen: `127.0.0.1:${port}`,
  advertise: `127.0.0.1:${port}`,
  lease: '2s',
  connectTimeout: '1s',
  forwardConnectTimeout: `${CHANNEL_MS}ms`,
});
const hosting = { anonServersPerIp: 20, rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } };

/** A GET to a daemon's plain edge, its body as text. */
const get = async (d: { http: number }, host: string, path = '/', headers: Record<string, string> = {}) => {
  const r = await request({ http: d.http, https: 0, ca: '' }, host, path, { headers });
  return { ...r, body: r.body.toString() };
};

async function createOnB(slug: string, page: string): Promise<{ id: string; api_key: string }> {
  const r = await api(b, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  const srv = r.json as { id: string; api_key: string };
  const w = await api(b, 'PUT', `/servers/${srv.id}/files?path=/root/www/index.html`, {
    key: srv.api_key,
    body: page,
    headers: { 'content-type': 'application/octet-stream' },
  });
  assert.is(w.status, 200, w.text);
  return srv;
}

async function createOnA(slug: string, page: string): Promise<string> {
  const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  const id = (r.json as { id: string }).id;
  const root = join(a.daemon.runtime.get(id)!.rootfs, 'root');
  mkdirSync(join(root, 'www'), { recursive: true });
  writeFileSync(join(root, 'www', 'index.html'), page);
  chmodSync(join(root, 'www', 'index.html'), 0o644);
  return id;
}

interface Period {
  from: number;
  to: number;
}
async function periods(serverId: string): Promise<Period[]> {
  const out = await pg.sql(
    `SELECT period_from || ' ' || period_to FROM ledger_entries WHERE server_id = '${serverId}' AND kind = 'usage' ORDER BY period_from`,
  );
  return out
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [from, to] = l.split(' ').map(Number);
      return { from, to };
    });
}
const placements = () => pg.sql(`SELECT server_id || ' ' || host || ' ' || epoch FROM placements ORDER BY server_id`);
const runcIds = async () => (await run('runc', ['--root', join(b.dataDir, 'runc'), 'list', '-q'])).stdout.split('\n').filter(Boolean).sort();
const bUp = () => a.daemon.registry!.placements.host('host-b')?.up;

test.before(async () => {
  pg = await startClusterRegistry();
  a = await startHost(pg, 'host-a', { cluster: cluster('host-a', await freePort()), hosting });
  bChannel = await freePort();
  b = new ProcDaemon({ config: { cluster: cluster('host-b', bChannel), billing: { meterInterval: '1s' }, hosting } });
  await b.start();
});
test.after(async () => {
  await run('nft', ['delete', 'table', 'inet', PARTITION]);
  await b?.remove();
  await a?.stop();
  await pg?.stop();
});

test("kill -9 of B: its servers answer 503 host_unavailable through A within 2 s, show unavailable in A's API, are not billed for the downtime, and serve again once B is back with nothing duplicated", async () => {
  kept = await createOnB('hf-kept', 'kept on B');
  gone = await createOnB('hf-gone', 'gone from B');
  await until("A serves B's page", async () => (await get(a, 'hf-kept.localhost')).body === 'kept on B', 30_000);
  await until('B meters its server into the registry', async () => (await periods(kept.id)).length >= 2, 30_000);
  const placedBefore = await placements();

  const tKill = Date.now();
  const t0 = performance.now();
  await b.kill(); // SIGKILL of the daemon's pid
  const first = await until('a 503 through A', async () => {
    const r = await get(a, 'hf-kept.localhost');
    return r.status === 503 ? r : undefined;
  });
  const sinceKill = performance.now() - t0;
  assert.ok(sinceKill < 2000, `503 through A ${Math.round(sinceKill)} ms after the kill`);
  assert.is(JSON.parse(first.body).error, 'host_unavailable');
  assert.ok(Number(first.headers['retry-after']) >= 1);
  const html = await get(a, 'hf-kept.localhost', '/', { accept: 'text/html' });
  assert.is(html.status, 503);
  assert.match(html.body, /<html/i);
  console.log(`first 503 host_unavailable through A: ${Math.round(sinceKill)} ms after kill -9 (that request: ${Math.round(first.ms)} ms)`);

  // the lease runs out: A knows B is down, answers without trying, and shows B's servers unavailable
  await until('A sees B down', () => bUp() === false, 10_000);
  const down = await get(a, 'hf-kept.localhost');
  assert.is(down.status, 503);
  assert.ok(down.ms < 500, `${down.ms} ms`);
  console.log(`B's lease ran out ${Math.round(performance.now() - t0)} ms after the kill; then 503 through A in ${Math.round(down.ms)} ms`);
  const one = await api(a, 'GET', `/servers/${kept.id}`, { key: kept.api_key });
  assert.is(one.status, 200, one.text);
  assert.is((one.json as { state: string }).state, 'unavailable');
  assert.is((one.json as { subdomain: string }).subdomain, 'hf-kept.localhost');
  assert.is((one.json as { usage: { disk_mb_used: number | null } }).usage.disk_mb_used, null, 'a figure not known here is null, not 0');
  const list = await api(a, 'GET', '/servers', { key: kept.api_key });
  assert.is(list.status, 200, list.text);
  assert.equal(
    (list.json as { servers: { id: string; state: string }[] }).servers.map((s) => [s.id, s.state]),
    [[kept.id, 'unavailable']],
  );
  const other = await api(a, 'GET', `/servers/${kept.id}`, { key: gone.api_key });
  assert.is(other.status, 404, "another account's server stays unknown");

  // meanwhile the registry deletes B's other server (its placement and slug), and A gives the
  // subdomain to a server of its own
  await pg.sql(`BEGIN; DELETE FROM placements WHERE server_id = '${gone.id}'; DELETE FROM slugs WHERE server_id = '${gone.id}'; COMMIT;`);
  const successor = await createOnA('hf-gone', 'new on A');
  const meteredWhileDown = (await periods(kept.id)).length;
  await until('a downtime of several meter periods', () => Date.now() - tKill > 4000, 10_000);
  assert.is((await periods(kept.id)).length, meteredWhileDown, 'nothing meters a dead host');

  const tStart = Date.now();
  await b.start();
  const t1 = performance.now();
  await until('B serves through A again', async () => (await get(a, 'hf-kept.localhost')).body === 'kept on B', 30_000);
  console.log(`served through A again ${Math.round(performance.now() - t1)} ms after B's restart`);

  // reconciled: the deleted server is gone from B, its subdomain reaches A's server through B too
  const viaB = await get(b, 'hf-gone.localhost');
  assert.is(viaB.body, 'new on A', 'B does not serve the server the registry deleted');
  assert.not.ok((await runcIds()).includes(gone.id), 'its container is gone');
  assert.is((await api(b, 'GET', `/servers/${gone.id}`, { key: gone.api_key })).status, 404);
  const row = (id: string) => pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`);
  assert.ok(placedBefore.includes(`${kept.id} ${await row(kept.id)}`), 'the kept server: one placement, on B, its epoch unchanged');
  assert.is(await row(gone.id), '', 'the deleted server: not placed again');
  assert.is(await row(successor), 'host-a 1');
  assert.equal(
    (await runcIds()).filter((id) => id === kept.id),
    [kept.id],
    'one container of the kept server',
  );
  const state = await api(b, 'GET', `/servers/${kept.id}`, { key: kept.api_key });
  assert.is((state.json as { state: string }).state, 'running');

  // billing: on again from the restart, the downtime never charged, no period charged twice
  await until('B meters again', async () => (await periods(kept.id)).some((p) => p.from >= tStart), 30_000);
  const ps = await periods(kept.id);
  for (const p of ps) assert.ok(p.to <= tKill || p.from >= tStart, `period ${p.from}–${p.to} is not in the downtime ${tKill}–${tStart}`);
  for (let i = 1; i < ps.length; i++) assert.ok(ps[i].from >= ps[i - 1].to, `periods ${i - 1} and ${i} do not overlap`);
});

test("a partition between A and B: requests through A fail within the channel timeouts, A's API lists B's servers unavailable, no placement changes, and B serves through A once healed", async () => {
  await until("A serves B's page over a session", async () => (await get(a, 'hf-kept.localhost')).body === 'kept on B', 10_000);
  const placedBefore = await placements();
  // packets to and from B's channel port dropped on loopback (both directions leave by output)
  const rules = `table inet ${PARTITION} {
    chain out {
      type filter hook output priority -10; policy accept;
      oifname "lo" tcp dport ${bChannel} drop
      oifname "lo" tcp sport ${bChannel} drop
    }
  }`;
  try {
    const added = await run('nft', ['-f', '-'], { input: rules });
    assert.is(added.code, 0, added.stderr);
    // the request on the open session: the session's ping goes unanswered, then a new session cannot open
    const cut = await get(a, 'hf-kept.localhost');
    assert.is(cut.status, 503, cut.body);
    assert.is(JSON.parse(cut.body).error, 'host_unavailable');
    assert.ok(cut.ms < 3 * CHANNEL_MS + 500, `the first request failed after ${Math.round(cut.ms)} ms`);
    // the requests after it fail at once, not each waiting for a connection
    const next: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await get(a, 'hf-kept.localhost');
      assert.is(r.status, 503);
      next.push(Math.round(r.ms));
    }
    assert.ok(Math.max(...next) < CHANNEL_MS / 2, `then ${next.join(', ')} ms`);
    console.log(`partition: first request 503 after ${Math.round(cut.ms)} ms, the next five after ${next.join(', ')} ms`);
    // A's API lists B's server, from its placement cache, as unavailable: B, up, gives no list
    const list = await api(a, 'GET', '/servers', { key: kept.api_key });
    assert.is(list.status, 200, list.text);
    assert.equal(
      (list.json as { servers: { id: string; state: string }[] }).servers.map((s) => [s.id, s.state]),
      [[kept.id, 'unavailable']],
    );
    // B itself is up: its lease runs, its own edge serves, the registry's placements are as they were
    assert.is((await get(b, 'hf-kept.localhost')).body, 'kept on B');
    assert.ok(bUp(), 'A still sees B up');
    assert.is(await placements(), placedBefore);
  } finally {
    await run('nft', ['delete', 'table', 'inet', PARTITION]);
  }
  const t0 = performance.now();
  await until('B serves through A again', async () => (await get(a, 'hf-kept.localhost')).body === 'kept on B', 10_000);
  console.log(`healed: served through A again after ${Math.round(performance.now() - t0)} ms`);
  assert.is(await placements(), placedBefore);
});

test('a clean stop of B charges its servers up to the stop, once', async () => {
  // an interval longer than the test: every period charged here is one a stop or a start made
  const cfg = JSON.parse(readFileSync(b.cfgFile, 'utf8')) as Record<string, unknown>;
  writeFileSync(b.cfgFile, JSON.stringify({ ...cfg, billing: { meterInterval: '1h' } }));
  await b.stop();
  const tStart = Date.now();
  await b.start();
  await until('B serves through A', async () => (await get(a, 'hf-kept.localhost')).body === 'kept on B', 10_000);
  const tStop = Date.now();
  await b.stop(); // SIGTERM
  const tStopped = Date.now();
  await b.start(); // writes what the stop charged into its outbox
  const ps = await until('the period up to the stop in the ledger', async () => {
    const all = await periods(kept.id);
    return all.some((p) => p.from >= tStart) ? all : undefined;
  });
  const run = ps.filter((p) => p.from >= tStart);
  assert.is(run.length, 1, 'one period for the run between the two starts');
  assert.ok(run[0].to >= tStop && run[0].to <= tStopped, `charged up to the stop: ${run[0].to} in ${tStop}–${tStopped}`);
  for (let i = 1; i < ps.length; i++) assert.ok(ps[i].from >= ps[i - 1].to, `periods ${i - 1} and ${i} do not overlap`);
});

test.run();
