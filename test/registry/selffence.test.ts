// Self-fencing with two daemons sharing a real PostgreSQL (issue 38): A reaches it directly, B
// through a TCP relay the test can cut (connections dropped, new ones accepted and never answered,
// as in a partition). B's servers are plain processes (SIGSTOP is the freeze). cluster.recoverAfter
// is 4 s on both: no host may recover another's servers before 4 s after its lease lapsed.
//   - B cut off from the registry alone (A still answers B on the channel): B keeps its server
//     running past recoverAfter, and A does not count B dead (its channel answers).
//   - A stopped and B cut off from the registry: B reaches nobody, so it freezes its running
//     server after recoverAfter/4 and stops it after recoverAfter/2 — before recoverAfter has
//     passed since the cut —, and refuses to start it (host_fenced); once the registry answers
//     again, B starts it on demand as before, and removes its copy of another server the registry
//     re-placed on host-a meanwhile (a recovery).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { until } from '../helpers/wait.js';
import { Relay } from './fixtures/relay.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

const RECOVER_MS = 4000;

let pg: TestPostgres;
let relay: Relay;
let a: TestDaemon;
let b: TestDaemon;
let id: string;
/** A second server of B's, recovered on host-a while B is cut off (the registry re-places it there). */
let moved: string;

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
const rt = () => b.daemon.runtime as unknown as ProcessRuntime;
const pidOf = (sid: string) => rt().servers.get(sid)?.child?.pid;

test.before(async () => {
  pg = await startClusterRegistry();
  relay = new Relay(pg.port);
  await relay.listen();
  const hosting = { rateLimit: { perIpPerMinute: 100_000, createsPerIpPerHour: 200 } };
  a = await startHost(pg, 'host-a', { cluster: cluster('host-a', await freePort(), pg.url), hosting });
  const viaRelay = pg.url.replace(`:${pg.port}/`, `:${relay.port}/`);
  b = await startHost(pg, 'host-b', { cluster: cluster('host-b', await freePort(), viaRelay), hosting });
  const r = await api(b, 'POST', '/create', { body: { subdomains: ['fence-b'] } });
  assert.is(r.status, 200, r.text);
  id = (r.json as { id: string }).id;
  const r2 = await api(b, 'POST', '/create', { body: { subdomains: ['fence-moved'] } });
  assert.is(r2.status, 200, r2.text);
  moved = (r2.json as { id: string }).id;
  await until('B and A answer each other on the channel', () => {
    const ab = a.daemon.registry!.contact.of('host-b').silentForMs === undefined;
    const ba = b.daemon.registry!.contact.of('host-a').silentForMs === undefined;
    return ab && ba;
  });
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await relay?.close();
  await pg?.stop();
});

test('B cut off from the registry alone (A answers it): its server keeps running past recoverAfter, and A does not count B dead', async () => {
  assert.is(rt().get(id)?.state, 'running');
  const pid = pidOf(id)!;
  relay.drop();
  const t0 = performance.now();
  try {
    await until('B finds the registry unreachable', () => !b.daemon.registry!.up, 10_000);
    await until("A sees B's lease lapsed", () => a.daemon.registry!.placements.host('host-b')?.lease === false, 10_000);
    // past recoverAfter since the cut, sampled all along: B never froze or stopped it
    while (performance.now() - t0 < RECOVER_MS + 1000) {
      assert.is(b.daemon.registry!.selfFence?.now, 'serve');
      assert.is(rt().get(id)?.state, 'running');
      assert.is.not(procState(pid), 'T');
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(a.daemon.registry!.contact.verdict('host-b'), { dead: false, why: 'channel' }, "B's channel answers A: not dead");
    assert.is(b.daemon.registry!.selfFence!.freezes + b.daemon.registry!.selfFence!.stops, 0);
  } finally {
    relay.heal();
  }
  await until('B reaches the registry again', () => b.daemon.registry!.up, 10_000);
});

test('A stopped and B cut off from the registry: B freezes its running server by recoverAfter/4, stops it by recoverAfter/2, refuses starts, and starts it once the registry is back', async () => {
  assert.is(rt().get(id)?.state, 'running');
  const pid = pidOf(id)!;
  await a.stop();
  relay.drop();
  const t0 = performance.now();
  try {
    await until('B freezes its server', () => procState(pid) === 'T', RECOVER_MS);
    const frozeMs = performance.now() - t0;
    // both of its running servers (their stops run at once: one may end a moment after the other)
    await until('B stops its servers', () => rt().get(id)?.state === 'sleeping' && rt().get(moved)?.state === 'sleeping', RECOVER_MS);
    const stoppedMs = performance.now() - t0;
    console.log(`cut off: frozen after ${Math.round(frozeMs)} ms, stopped after ${Math.round(stoppedMs)} ms (recoverAfter ${RECOVER_MS} ms)`);
    assert.ok(frozeMs >= RECOVER_MS / 4, `not frozen before a quarter of recoverAfter (${Math.round(frozeMs)} ms)`);
    assert.ok(frozeMs < stoppedMs);
    // the others count recoverAfter from the lapse of B's lease, which is after the cut
    assert.ok(stoppedMs < RECOVER_MS, `stopped ${Math.round(stoppedMs)} ms after the cut, before recoverAfter`);
    try {
      await b.daemon.runtime.start(id);
      assert.unreachable('a start while fenced');
    } catch (e) {
      assert.is((e as { code?: string }).code, 'host_fenced');
    }
    assert.is(rt().get(id)?.state, 'sleeping');
    assert.is(rt().get(moved)?.state, 'sleeping');
    // meanwhile the others count B dead and recover one of its servers on host-a (its placement at the next epoch)
    await pg.sql(`UPDATE placements SET host = 'host-a', instance = 'ins_a_elsewhere', epoch = epoch + 1 WHERE server_id = '${moved}'`);
  } finally {
    relay.heal();
  }
  await until('B reaches the registry again', () => b.daemon.registry!.up && b.daemon.registry!.selfFence?.now === 'serve', 10_000);
  await b.daemon.runtime.start(id); // on demand, through the wake fence: still B's
  assert.is(rt().get(id)?.state, 'running');
  // the recovered one: B's copy removed once it reached the registry again, never started
  await until('B removes its copy of the server recovered on host-a', () => !b.daemon.store.servers.get(moved) && !rt().get(moved), 10_000);
  assert.ok(b.logs.some((l) => l.msg === 'stale copies of servers placed on another host removed' && JSON.stringify(l.removed) === JSON.stringify([moved])));
  assert.match(await pg.sql(`SELECT host FROM placements WHERE server_id = '${moved}'`), 'host-a');
});

test.run();
