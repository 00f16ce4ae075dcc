// A minority partition and a server re-placed while its old host runs (issue 38, review H2), with
// three daemons sharing a real PostgreSQL: A reaches it directly, B and C each through a TCP
// relay the test cuts. Servers are plain processes (SIGSTOP is the freeze). recoverAfter 4 s.
//   - The registry re-places one of B's servers on host-a at the next epoch (a recovery there)
//     while B runs it and reaches everyone: B stops it and drops its copy at once, no fence
//     episode needed, and its edge no longer answers its slug from that copy.
//   - {registry, A} | {B, C}: B and C are cut off from the registry and from A (stopped here:
//     to B and C the same silence) but answer each other. Neither reached the registry, so
//     neither vouches for the other: both freeze their running servers by recoverAfter/4 and stop
//     them by recoverAfter/2, before A could count them dead.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { until } from '../helpers/wait.js';
import { get } from './fixtures/clients.js';
import { Relay } from './fixtures/relay.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

const RECOVER_MS = 4000;

let pg: TestPostgres;
let relayB: Relay;
let relayC: Relay;
let a: TestDaemon;
let b: TestDaemon;
let c: TestDaemon;
const ids = { b: '', c: '', moved: '', movedSlug: '' };

const cluster = (host: string, port: number, registry: string) => ({
  registry,
  host,
  listen: `127.0.0.1:${port}`,
  advertise: `127.0.0.1:${port}`,
  lease: '1500ms',
  connectTimeout: '300ms',
  statementTimeout: '1s',
  forwardConnectTimeout: '300ms',
  recoverAfter: `${RECOVER_MS}ms`,
});

/** The state letter of a process in /proc (T: stopped by SIGSTOP). */
function procState(pid: number): string {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2, s.lastIndexOf(')') + 3);
}
const rt = (d: TestDaemon) => d.daemon.runtime as unknown as ProcessRuntime;
const pidOf = (d: TestDaemon, sid: string) => rt(d).servers.get(sid)?.child?.pid;

async function create(d: TestDaemon, slug: string): Promise<string> {
  const r = await api(d, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  return (r.json as { id: string }).id;
}

test.before(async () => {
  pg = await startClusterRegistry();
  relayB = new Relay(pg.port);
  relayC = new Relay(pg.port);
  await relayB.listen();
  await relayC.listen();
  const hosting = { rateLimit: { perIpPerMinute: 100_000, createsPerIpPerHour: 200 } };
  const via = (r: Relay) => pg.url.replace(`:${pg.port}/`, `:${r.port}/`);
  a = await startHost(pg, 'host-a', { cluster: cluster('host-a', await freePort(), pg.url), hosting });
  b = await startHost(pg, 'host-b', { cluster: cluster('host-b', await freePort(), via(relayB)), hosting });
  c = await startHost(pg, 'host-c', { cluster: cluster('host-c', await freePort(), via(relayC)), hosting });
  ids.b = await create(b, 'minority-b');
  ids.c = await create(c, 'minority-c');
  ids.movedSlug = 'minority-moved';
  ids.moved = await create(b, ids.movedSlug);
  const hears = (x: TestDaemon, y: string) => x.daemon.registry!.contact.of(y).silentForMs === undefined;
  await until('every host answers every other on the channel', () =>
    [
      [a, 'host-b'],
      [a, 'host-c'],
      [b, 'host-a'],
      [b, 'host-c'],
      [c, 'host-a'],
      [c, 'host-b'],
    ].every(([x, y]) => hears(x as TestDaemon, y as string)),
  );
});
test.after(async () => {
  await c?.stop();
  await b?.stop();
  await a?.stop();
  await relayB?.close();
  await relayC?.close();
  await pg?.stop();
});

test("a server of B's the registry re-places on host-a while B runs it: B stops it and drops its copy at once (no fence), and its edge stops answering it from that copy", async () => {
  assert.is(rt(b).get(ids.moved)?.state, 'running');
  // a page only B's copy has
  const www = join(rt(b).get(ids.moved)!.rootfs, 'root', 'www');
  mkdirSync(www, { recursive: true });
  writeFileSync(join(www, 'index.html'), 'served from the copy on host-b\n');
  const before = await get(b, `${ids.movedSlug}.localhost`, '/index.html');
  assert.match(before.body.toString(), 'served from the copy on host-b');
  // recovered on host-a meanwhile (its placement at the next epoch)
  await pg.sql(`UPDATE placements SET host = 'host-a', instance = 'ins_a_elsewhere', epoch = epoch + 1 WHERE server_id = '${ids.moved}'`);
  await until("B's cache places it on host-a", () => b.daemon.registry!.placements.byServer(ids.moved)?.host === 'host-a', 5000, 10);
  const after = await get(b, `${ids.movedSlug}.localhost`, '/index.html');
  assert.not.match(after.body.toString(), 'served from the copy on host-b', `B's edge answered from its copy (${after.status})`);
  await until('B removes its copy', () => !b.daemon.store.servers.get(ids.moved) && !rt(b).get(ids.moved), 5000);
  assert.ok(
    b.logs.some((l) => l.msg === 'stale copies of servers placed on another host removed' && JSON.stringify(l.removed) === JSON.stringify([ids.moved])),
  );
  assert.is(b.daemon.registry!.selfFence!.freezes + b.daemon.registry!.selfFence!.stops, 0, 'no fence episode');
  assert.is(rt(b).get(ids.b)?.state, 'running', 'its other server untouched');
  assert.match(await pg.sql(`SELECT host FROM placements WHERE server_id = '${ids.moved}'`), 'host-a');
});

test('{registry, A} | {B, C}: B and C answer each other, yet neither reaches the registry, so both freeze by recoverAfter/4 and stop by recoverAfter/2', async () => {
  const pids = { b: pidOf(b, ids.b)!, c: pidOf(c, ids.c)! };
  assert.is(rt(b).get(ids.b)?.state, 'running');
  assert.is(rt(c).get(ids.c)?.state, 'running');
  relayB.drop();
  relayC.drop();
  const t0 = performance.now();
  await until('B and C find the registry unreachable', () => !b.daemon.registry!.up && !c.daemon.registry!.up, RECOVER_MS);
  await a.stop(); // A (and the registry) out of B's and C's sight
  assert.ok(b.daemon.registry!.contact.of('host-c').silentForMs === undefined, 'B still hears C');
  assert.ok(c.daemon.registry!.contact.of('host-b').silentForMs === undefined, 'C still hears B');
  await until('B and C freeze their servers', () => procState(pids.b) === 'T' && procState(pids.c) === 'T', RECOVER_MS);
  const frozeMs = performance.now() - t0;
  await until('B and C stop their servers', () => rt(b).get(ids.b)?.state === 'sleeping' && rt(c).get(ids.c)?.state === 'sleeping', RECOVER_MS);
  const stoppedMs = performance.now() - t0;
  console.log(`minority: frozen after ${Math.round(frozeMs)} ms, stopped after ${Math.round(stoppedMs)} ms (recoverAfter ${RECOVER_MS} ms)`);
  assert.ok(frozeMs >= RECOVER_MS / 4, `not frozen before a quarter of recoverAfter (${Math.round(frozeMs)} ms)`);
  assert.ok(stoppedMs < RECOVER_MS, `stopped ${Math.round(stoppedMs)} ms after the cut, before recoverAfter`);
  assert.ok(b.daemon.registry!.contact.of('host-c').silentForMs === undefined, 'B heard C all along');
  for (const [d, id] of [
    [b, ids.b],
    [c, ids.c],
  ] as const)
    try {
      await d.daemon.runtime.start(id);
      assert.unreachable('a start while fenced');
    } catch (e) {
      assert.is((e as { code?: string }).code, 'host_fenced');
    }
});

test.run();
