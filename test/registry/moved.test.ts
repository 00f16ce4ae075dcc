// A slug that moves between hosts (issue 29): deleted on A and re-created on B while an edge's
// placement cache still names A — three daemons on one real PostgreSQL registry, servers as plain
// processes with static pages. The edge whose cache is stale is held so, deterministically: its
// cache's catch-ups (the ones NOTIFY and its timer start) wait until the edge itself asks the
// registry (PlacementCache.fresh), as if the notification were late — the window that is a few
// milliseconds long in production and that a test cannot otherwise hit on purpose.
//   - through A's own edge (it deleted the server; its cache names itself): B's server answers,
//     at once, and A's cache converges to B;
//   - through C's edge (its cache routes the slug to A): A answers "not here" once, C reads the
//     registry once and B's server answers — never A's 404, never the old page;
//   - an owner whose own cache lacks its server (its catch-up behind) still checks the epoch a
//     sender saw, against the one it wrote itself: a restart on A bumped it, C still routes by the
//     old one: A answers "not here" once, C reads the registry and A's server answers.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { PlacementCache } from '../../src/registry/index.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { get, getH2, type Got } from './fixtures/clients.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let c: TestDaemon;

test.before(async () => {
  pg = await startClusterRegistry();
  a = await startHost(pg, 'host-a');
  b = await startHost(pg, 'host-b');
  c = await startHost(pg, 'host-c');
  for (const d of [a, b, c])
    for (const name of ['host-a', 'host-b', 'host-c']) await until(`every host sees ${name} up`, () => d.daemon.registry!.placements.host(name)?.up, 5000);
});
test.after(async () => {
  await c?.stop();
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

async function create(d: TestDaemon, slug: string, page: string): Promise<{ id: string; api_key: string }> {
  const r = await api(d, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  const www = join(d.daemon.runtime.get(r.json.id)!.rootfs, 'root', 'www');
  mkdirSync(www, { recursive: true });
  writeFileSync(join(www, 'index.html'), page);
  return r.json;
}

/** Holds `d`'s placement cache at what it has now until its edge asks the registry (fresh()); counts those asks. */
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

/** A's "not here" answers for a site so far (its channel's log). */
const notHere = (site: string) => a.logs.filter((l) => l.msg === 'not here: the sender routed by a stale placement' && l.site === site).length;

const via: Record<string, (d: TestDaemon, host: string) => Promise<Got>> = {
  'HTTP/1.1 (the lane)': (d, host) => get(d, host, '/', { headers: { accept: 'text/html' } }),
  'HTTP/1.1 over TLS': (d, host) => get(d, host, '/', { tls: true, headers: { accept: 'text/html' } }),
  'HTTP/2': async (d, host) => (await getH2(d, host, ['/']))[0],
};

test("deleted on A and re-created on B: A's edge answers from B's server while its cache still names A, and its cache converges", async () => {
  for (const [name, send] of Object.entries(via)) {
    const slug = `own${Object.keys(via).indexOf(name)}`;
    const host = `${slug}.localhost`;
    const old = await create(a, slug, `old page on A (${name})`);
    assert.is((await send(a, host)).body.toString(), `old page on A (${name})`);
    const held = holdCache(a);
    try {
      assert.is((await api(a, 'DELETE', `/servers/${old.id}`, { key: old.api_key })).status, 200);
      const moved = await create(b, slug, `new page on B (${name})`);
      assert.is(a.daemon.registry!.placements.bySlug(slug)?.serverId, old.id, "A's cache still names the old server");
      const r = await send(a, host);
      assert.is(
        r.status,
        200,
        `${name}: ${r.status} ${r.body
          .toString()
          .replace(/<style>[^]*<\/style>/, '')
          .slice(0, 1500)}`,
      );
      assert.is(r.body.toString(), `new page on B (${name})`, name);
      assert.ok(held.asks() <= 1, `${name}: one registry read (${held.asks()})`);
      await until("A's cache converges", () => a.daemon.registry!.placements.bySlug(slug)?.serverId === moved.id, 5000);
      assert.is(a.daemon.registry!.placements.bySlug(slug)?.host, 'host-b');
      assert.is(a.daemon.registry!.placements.byServer(old.id), undefined);
    } finally {
      held.release();
    }
  }
});

test("a stale route on C (the slug on A) costs one 'not here' from A and one registry read; B's new server answers, never A", async () => {
  for (const [name, send] of Object.entries(via)) {
    const slug = `far${Object.keys(via).indexOf(name)}`;
    const host = `${slug}.localhost`;
    const old = await create(a, slug, `old page on A (${name})`);
    assert.is((await send(c, host)).body.toString(), `old page on A (${name})`, 'C routes the slug to A');
    const held = holdCache(c);
    try {
      assert.is((await api(a, 'DELETE', `/servers/${old.id}`, { key: old.api_key })).status, 200);
      const moved = await create(b, slug, `new page on B (${name})`);
      assert.is(c.daemon.registry!.placements.bySlug(slug)?.host, 'host-a', "C's cache still routes to A");
      const before = notHere(host);
      const r = await send(c, host);
      assert.is(
        r.status,
        200,
        `${name}: ${r.status} ${r.body
          .toString()
          .replace(/<style>[^]*<\/style>/, '')
          .slice(0, 1500)}`,
      );
      assert.is(r.body.toString(), `new page on B (${name})`, name);
      assert.is(notHere(host) - before, 1, `${name}: A answered "not here" once`);
      assert.is(held.asks(), 1, `${name}: C read the registry once`);
      assert.is(c.daemon.registry!.placements.bySlug(slug)?.serverId, moved.id, "C's cache now routes to B");
      assert.is((await send(c, host)).body.toString(), `new page on B (${name})`);
      assert.is(notHere(host) - before, 1, 'the next request goes straight to B');
    } finally {
      held.release();
    }
  }
});

test("an owner whose cache lacks its server checks the sender's epoch against the one it wrote: C's older epoch costs one 'not here'", async () => {
  for (const [name, send] of Object.entries(via)) {
    const slug = `epo${Object.keys(via).indexOf(name)}`;
    const host = `${slug}.localhost`;
    const heldA = holdCache(a); // A's cache will lack the server it makes now
    let heldC: ReturnType<typeof holdCache> | undefined;
    try {
      const s = await create(a, slug, `page on A (${name})`);
      assert.is(a.daemon.registry!.placements.byServer(s.id), undefined, "A's cache lacks it");
      await until('C sees it at epoch 1', () => c.daemon.registry!.placements.byServer(s.id)?.epoch === 1, 5000);
      heldC = holdCache(c); // C keeps routing by epoch 1
      // a restart on A: its start compares and bumps the epoch
      assert.is((await api(a, 'POST', `/servers/${s.id}/restart`, { key: s.api_key })).status, 200);
      assert.is(await pg.sql(`SELECT epoch FROM placements WHERE server_id = '${s.id}'`), '2');
      assert.is(a.daemon.registry!.placements.byServer(s.id), undefined, "A's cache still lacks it");
      const before = notHere(host);
      const r = await send(c, host);
      assert.is(r.status, 200, `${name}: ${r.status}`);
      assert.is(r.body.toString(), `page on A (${name})`);
      assert.is(notHere(host) - before, 1, `${name}: A answered "not here" to epoch 1 once`);
      assert.is(heldC.asks(), 1, `${name}: C read the registry once`);
    } finally {
      heldC?.release();
      heldA.release();
    }
  }
});

test.run();
