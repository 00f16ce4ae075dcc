// The owner's view of its own server's epoch when its placement cache trails its own write (the
// container-tier flake of registry/apifwd: "through B's API: restart, expose and unexpose A's
// server" answered 503 "host-a no longer runs it"). Two daemons on one real PostgreSQL registry,
// servers as plain processes on host-a, requests sent to host-b. A restart on A bumps the
// server's epoch (its start's compare-and-set, registry/fence.ts); B's cache may hear of it
// before A's own does — both follow the change feed, and under load A's catch-up can come later
// (its NOTIFY handled after B's, or a catch-up that failed, waiting for the next tick). Then B
// sends the new epoch, A's cache still holds the old one, A answered "not here", B's registry read
// confirmed what it had sent, and the client got 503 host_unavailable "no longer runs it" — for a
// server that never left A. The window is held open here on purpose: A's cache's catch-ups wait
// until the end of the test, as if they were late; B's cache follows freely.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ownersView, type PlacementToRoute } from '../../src/channel/lookup.js';
import type { PlacementCache } from '../../src/registry/index.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { get, getH2 } from './fixtures/clients.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;

test.before(async () => {
  pg = await startClusterRegistry();
  a = await startHost(pg, 'host-a');
  b = await startHost(pg, 'host-b');
  for (const d of [a, b]) for (const name of ['host-a', 'host-b']) await until(`${name} up`, () => d.daemon.registry!.placements.host(name)?.up, 5000);
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

/** Holds `d`'s placement cache at what it has now: every catch-up (NOTIFY's, the timer's) waits
 *  until its edge asks the registry itself (fresh(), after a "not here") or `release`; counts those asks. */
function holdCache(d: TestDaemon): { asks: () => number; release: () => void } {
  const cache = d.daemon.registry!.placements;
  const own = cache as unknown as { sync: PlacementCache['sync']; fresh: PlacementCache['fresh'] };
  const sync = cache.sync.bind(cache);
  const fresh = cache.fresh.bind(cache);
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  let asks = 0;
  own.sync = () => gate.then(sync);
  own.fresh = (slug) => {
    asks++;
    open();
    return fresh(slug);
  };
  return {
    asks: () => asks,
    release: () => {
      open();
      delete (own as Partial<typeof own>).sync;
      delete (own as Partial<typeof own>).fresh;
    },
  };
}

/** A's "not here" answers so far: to API requests (owner-api.ts) and to the edge's (owner-server.ts). */
const notHere = () => a.logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('not here:')).length;

test("ownersView: the newest epoch this host knows — the cache's, or the one it wrote when the cache trails it", () => {
  const cached = new Map<string, PlacementToRoute>([
    ['srv_1', { serverId: 'srv_1', slug: 'one', host: 'host-a', epoch: 3 }],
    ['srv_2', { serverId: 'srv_2', slug: 'two', host: 'host-b', epoch: 7 }],
    ['srv_3', { serverId: 'srv_3', slug: 'three', host: 'host-b', epoch: 9 }],
  ]);
  const wrote = new Map([
    ['srv_1', 4], // restarted here: its start bumped 3 → 4, the cache has not heard
    ['srv_2', 8], // taken over from host-b (a move, a recovery) at 8, the cache still names host-b at 7
    ['srv_3', 5], // started here at 5, moved to host-b since (9): the cache is newer
    ['srv_4', 1], // placed here a moment ago, the cache lacks it
  ]);
  const view = ownersView({ byServer: (id) => cached.get(id) }, 'host-a', (id) => wrote.get(id));
  const at = (id: string) => {
    const p = view.byServer(id);
    return p && [p.host, p.epoch];
  };
  assert.equal(at('srv_1'), ['host-a', 4]);
  assert.is(view.byServer('srv_1')?.slug, 'one');
  assert.equal(at('srv_2'), ['host-a', 8]);
  assert.equal(at('srv_3'), ['host-b', 9]);
  assert.equal(at('srv_4'), ['host-a', 1]);
  assert.is(view.byServer('srv_5'), undefined);
  assert.equal(ownersView({ byServer: (id) => cached.get(id) }, 'host-a').byServer('srv_1'), cached.get('srv_1'), 'nothing written: the cache');
});

test("a restart on A that B's cache hears of before A's own: B's API and edge reach A's server at the new epoch, never 503 'no longer runs it'", async () => {
  const made = await api(a, 'POST', '/create', { body: { subdomains: ['own-epoch'] } });
  assert.is(made.status, 200, made.text);
  const s = made.json as { id: string; api_key: string };
  const www = join(a.daemon.runtime.get(s.id)!.rootfs, 'root', 'www');
  mkdirSync(www, { recursive: true });
  writeFileSync(join(www, 'index.html'), 'page on A');
  const epoch = () => pg.sql(`SELECT epoch FROM placements WHERE server_id = '${s.id}'`).then(Number);
  const first = await epoch();
  await until('both caches place it on A', () => [a, b].every((d) => d.daemon.registry!.placements.byServer(s.id)?.epoch === first), 5000);
  const held = holdCache(a);
  try {
    const restarted = await api(b, 'POST', `/servers/${s.id}/restart`, { key: s.api_key });
    assert.is(restarted.status, 200, restarted.text);
    assert.is(await epoch(), first + 1, "the restart's start bumped the epoch");
    await until("B's cache has the new epoch", () => b.daemon.registry!.placements.byServer(s.id)?.epoch === first + 1, 5000);
    assert.is(a.daemon.registry!.placements.byServer(s.id)?.epoch, first, "A's own cache still has the old one");
    const before = notHere();
    // what apifwd's test sends next, each through B's API: a command, expose, unexpose
    const ran = await api(b, 'POST', `/servers/${s.id}/exec`, { key: s.api_key, body: { command: 'echo still-on-a' } });
    assert.is(ran.status, 200, ran.text);
    assert.is(ran.json.stdout, 'still-on-a\n');
    const exposed = await api(b, 'POST', '/expose', { key: s.api_key, body: { server: s.id, port: 8080 } });
    assert.is(exposed.status, 200, exposed.text);
    assert.is(exposed.json.container_port, 8080);
    const gone = await api(b, 'DELETE', '/expose', { key: s.api_key, body: { server: s.id, port: 8080 } });
    assert.is(gone.status, 200, gone.text);
    // the edge's forwarding takes the same check on A (owner-server.ts): the lane and HTTP/2
    const lane = await get(b, 'own-epoch.localhost', '/', { headers: { accept: 'text/html' } });
    assert.is(lane.status, 200, lane.body.toString().slice(0, 500));
    assert.is(lane.body.toString(), 'page on A');
    const [h2] = await getH2(b, 'own-epoch.localhost', ['/']);
    assert.is(h2.status, 200, h2.body.toString().slice(0, 500));
    assert.is(h2.body.toString(), 'page on A');
    assert.is(notHere() - before, 0, 'A never answered "not here" for the server it runs at the epoch B sent');
    assert.is(a.daemon.registry!.placements.byServer(s.id)?.epoch, first, "A's cache was behind all along");
    assert.is(held.asks(), 0, 'A read nothing');
  } finally {
    held.release();
  }
  await until("A's cache catches up", () => a.daemon.registry!.placements.byServer(s.id)?.epoch === first + 1, 5000);
});

test("the other order still costs one 'not here': B's cache behind A's restart sends the old epoch, reads the registry once, and reaches A", async () => {
  const made = await api(a, 'POST', '/create', { body: { subdomains: ['own-epoch-two'] } });
  assert.is(made.status, 200, made.text);
  const s = made.json as { id: string; api_key: string };
  await until("B's cache places it on A", () => b.daemon.registry!.placements.byServer(s.id)?.host === 'host-a', 5000);
  const old = b.daemon.registry!.placements.byServer(s.id)!.epoch;
  const held = holdCache(b); // B keeps the old epoch until it asks the registry after A's "not here"
  try {
    assert.is((await api(a, 'POST', `/servers/${s.id}/restart`, { key: s.api_key })).status, 200);
    await until("A's cache has the new epoch", () => a.daemon.registry!.placements.byServer(s.id)?.epoch === old + 1, 5000);
    assert.is(b.daemon.registry!.placements.byServer(s.id)?.epoch, old, "B's cache has the old epoch");
    const before = notHere();
    const ran = await api(b, 'POST', `/servers/${s.id}/exec`, { key: s.api_key, body: { command: 'echo there' } });
    assert.is(ran.status, 200, ran.text);
    assert.is(ran.json.stdout, 'there\n');
    assert.is(notHere() - before, 1, 'A answered "not here" once');
    assert.is(held.asks(), 1, 'B read the registry once');
    assert.is(b.daemon.registry!.placements.byServer(s.id)?.epoch, old + 1);
  } finally {
    held.release();
  }
});

test.run();
