// What keeps a host that may still run its servers from being recovered (issue 38, review H1 and
// M5), with two daemons on a real PostgreSQL, B reaching it through a relay the test cuts.
// cluster.recoverAfter is 0 (no self-fence, no recovery but the operator's). Servers are plain
// processes, which outlive their daemon as containers do.
//   - B cut off from the registry alone, its lease lapsed, still answering A on the channel:
//     `cluster recover host-b` is refused (recover_host_reached), even with --force.
//   - B's daemon stopped while its server keeps running (systemctl stop, an upgrade): its lease is
//     not released — it runs out as after a crash — so a recovery right after is refused
//     (recover_host_live); once it lapsed and B is silent, only --force (the operator's word that
//     B is down) gets past the guard.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { rmSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { until } from '../helpers/wait.js';
import { Relay } from './fixtures/relay.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

const LEASE_MS = 1500;
let pg: TestPostgres;
let relay: Relay;
let a: TestDaemon;
let b: TestDaemon;
let bStopped = false;
let id = '';

const cluster = (host: string, port: number, registry: string) => ({
  registry,
  host,
  listen: `127.0.0.1:${port}`,
  advertise: `127.0.0.1:${port}`,
  lease: `${LEASE_MS}ms`,
  connectTimeout: '300ms',
  statementTimeout: '1s',
  forwardConnectTimeout: '300ms',
  recoverAfter: 0,
});

/** A's operator recovery of host-b: the code it is refused with (undefined: past the guards). */
async function recover(force = false): Promise<string | undefined> {
  try {
    await a.daemon.moves.recover('host-b', { force });
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code;
  }
}

test.before(async () => {
  pg = await startClusterRegistry();
  relay = new Relay(pg.port);
  await relay.listen();
  a = await startHost(pg, 'host-a', { cluster: cluster('host-a', await freePort(), pg.url) });
  b = await startHost(pg, 'host-b', { cluster: cluster('host-b', await freePort(), pg.url.replace(`:${pg.port}/`, `:${relay.port}/`)) });
  const r = await api(b, 'POST', '/create', { body: { subdomains: ['guard-b'] } });
  assert.is(r.status, 200, r.text);
  id = (r.json as { id: string }).id;
  await until(
    'A and B answer each other',
    () => a.daemon.registry!.contact.reachedAgo('host-b') === 0 && b.daemon.registry!.contact.reachedAgo('host-a') === 0,
  );
});
test.after(async () => {
  if (bStopped) {
    const rt = b.daemon.runtime as unknown as ProcessRuntime;
    for (const s of rt.list()) await rt.delete(s.id).catch(() => {});
    rmSync(b.dataDir, { recursive: true, force: true });
  } else await b?.stop();
  await a?.stop();
  await relay?.close();
  await pg?.stop();
});

test('B cut off from the registry alone, its lease lapsed but answering A: its recovery is refused, even with --force', async () => {
  relay.drop();
  try {
    await until("A sees B's lease lapsed", async () => !(await a.daemon.registry!.hosts.list()).find((h) => h.name === 'host-b')!.up, 10_000);
    assert.is(a.daemon.registry!.contact.reachedAgo('host-b'), 0, 'B still answers A');
    assert.is(await recover(), 'recover_host_reached');
    assert.is(await recover(true), 'recover_host_reached');
    assert.match(await pg.sql(`SELECT host FROM placements WHERE server_id = '${id}'`), 'host-b');
  } finally {
    relay.heal();
  }
  await until('B reaches the registry again', () => b.daemon.registry!.up, 10_000);
});

test("B's daemon stopped while its server runs: its lease is kept to run out, so no recovery right after; then only with --force", async () => {
  const rt = b.daemon.runtime as unknown as ProcessRuntime;
  assert.is(rt.get(id)?.state, 'running');
  await b.daemon.stop(); // the daemon alone: its server keeps running, as containers do
  bStopped = true;
  assert.is(rt.get(id)?.state, 'running', 'the server outlives the daemon');
  const left = Number(await pg.sql(`SELECT (extract(epoch FROM lease_until - now()) * 1000)::bigint FROM hosts WHERE name = 'host-b'`));
  assert.ok(left > 0, `the lease still runs after the stop (${left} ms left): released, it would show B down at once`);
  assert.is(await recover(true), 'recover_host_live');
  await until('B silent for a lease', () => (a.daemon.registry!.contact.reachedAgo('host-b') ?? Infinity) >= LEASE_MS, 10_000, 50);
  await until("B's lease lapsed", async () => !(await a.daemon.registry!.hosts.list()).find((h) => h.name === 'host-b')!.up, 10_000, 50);
  assert.is(await recover(), 'recover_needs_force', 'recoverAfter 0: no self-fence, the operator must say B is down');
  // past the guards: here the recovery then needs a shared checkpoint store, which this test has none of
  assert.is(await recover(true), 'move_needs_shared_store');
});

test.run();
