// Registry hiccups are not dead hosts (issue 35 item 6), with two daemons on one machine sharing a
// real PostgreSQL: A reaches it directly, B through a TCP relay the test can cut (a partition
// between B and the registry only: its connections dropped, new ones accepted and never
// answered). Clients request a server of B through A's edge and a server of A through B's, without
// a pause, the whole time.
//   - The registry stopped for several leases (every host's lease lapses: nobody can write a
//     heartbeat), then started: no forwarded request is answered 503 during the outage or after
//     the registry is back (before, every host counted the others down until their next heartbeat).
//   - B cut off from the registry alone: its lease lapses, but its channel answers, so A keeps
//     forwarding to it; B keeps forwarding to A; B's own edge serves its server; once healed, B's
//     lease runs again.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { Relay } from './fixtures/relay.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { sleep, until } from '../helpers/wait.js';
import { claimName, PlacementCache, RegistryPool } from '../../src/registry/index.js';
import { get } from './fixtures/clients.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

const LEASE_MS = 2000;

let pg: TestPostgres;
let relay: Relay;
let a: TestDaemon;
let b: TestDaemon;

const cluster = (host: string, port: number, registry: string) => ({
  registry,
  host,
  listen: `127.0.0.1:${port}`,
  advertise: `127.0.0.1:${port}`,
  lease: `${LEASE_MS}ms`,
  connectTimeout: '500ms',
  statementTimeout: '1s',
  forwardConnectTimeout: '500ms',
});

async function create(d: TestDaemon, slug: string, page: string): Promise<string> {
  const r = await api(d, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  const id = (r.json as { id: string }).id;
  const www = join(d.daemon.runtime.get(id)!.rootfs, 'root', 'www');
  mkdirSync(www, { recursive: true });
  writeFileSync(join(www, 'index.html'), page);
  return id;
}

interface Sample {
  at: number;
  status: number;
  body: string;
}

/** Two clients requesting `host` on `d`'s edge one request after another until stopped. */
function hammer(d: TestDaemon, host: string) {
  let on = true;
  const samples: Sample[] = [];
  const loop = async () => {
    while (on) {
      const r = await get(d, host, '/').then(
        (x) => ({ status: x.status, body: x.body.toString() }),
        (e: Error) => ({ status: 0, body: e.message }),
      );
      samples.push({ at: performance.now(), ...r });
    }
  };
  const done = Promise.all([loop(), loop()]);
  return {
    samples,
    async stop() {
      on = false;
      await done;
    },
  };
}

const failed = (s: Sample[], page: string) => s.filter((x) => x.status !== 200 || x.body !== page);
/** The distinct failures: status and detail (without the request id). */
const summary = (s: Sample[]) => [...new Set(s.map((x) => `${x.status} ${x.body.replace(/,"request_id":"[^"]*"/, '').slice(0, 200)}`))].join(' | ');
/** Milliseconds a host's lease runs for still (negative: lapsed), by the registry's clock. */
const leaseLeft = async (host: string) =>
  Number(await pg.sql(`SELECT (extract(epoch FROM lease_until - now()) * 1000)::bigint FROM hosts WHERE name = '${host}'`));

test.before(async () => {
  pg = await startClusterRegistry();
  relay = new Relay(pg.port);
  await relay.listen();
  const hosting = { rateLimit: { perIpPerMinute: 100_000, createsPerIpPerHour: 200 } };
  a = await startHost(pg, 'host-a', { cluster: cluster('host-a', await freePort(), pg.url), hosting });
  const viaRelay = pg.url.replace(`:${pg.port}/`, `:${relay.port}/`);
  b = await startHost(pg, 'host-b', { cluster: cluster('host-b', await freePort(), viaRelay), hosting });
  await create(a, 'hic-a', 'on A');
  await create(b, 'hic-b', 'on B');
  await until("A serves B's server", async () => (await get(a, 'hic-b.localhost', '/')).body.toString() === 'on B', 20_000);
  await until("B serves A's server", async () => (await get(b, 'hic-a.localhost', '/')).body.toString() === 'on A', 20_000);
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await relay?.close();
  await pg?.stop();
});

test('the registry stopped for three leases, then started: no forwarded request answers 503, during the outage or after', async () => {
  // beside the daemons, a placement cache with no channel (the lease alone decides) on a clock the
  // test moves, and a host-c that heartbeats until the outage and never after it
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 500, statementTimeoutMs: 1000 });
  let skew = 0;
  const side = new PlacementCache(pool, { refreshMs: 200, connectTimeoutMs: 500, leaseMs: LEASE_MS, now: () => performance.now() + skew });
  const facts = (name: string) => ({ name, advertise: '127.0.0.1:1', publicIp: '10.0.0.9', version: 'test', capacity: {} });
  // a host of its own instance and run, heartbeating as a daemon's claim does
  const beat = (name: string) =>
    claimName(pool, facts(name), { instance: `ins_${name}`, run: `run_${name}`, fresh: false, held: false }, { leaseMs: LEASE_MS, replace: false });
  await side.start();
  await beat('host-c');
  await until('the side cache sees host-c up', () => side.host('host-c')?.up === true, 5000, 10);
  const viaA = hammer(a, 'hic-b.localhost');
  const viaB = hammer(b, 'hic-a.localhost');
  try {
    await until('both clients are served before the fault', () => viaA.samples.length > 0 && viaB.samples.length > 0, 10_000, 10);
    await pg.halt();
    const halted = performance.now();
    await sleep(3 * LEASE_MS); // every lease lapses: no host can write its heartbeat
    await pg.start();
    const back = performance.now();
    console.log(`registry down ${Math.round(back - halted)} ms`);
    // host-x, new after the outage, in the side cache: it has read the hosts since the registry came back
    await until(
      'host-x registered',
      () =>
        beat('host-x').then(
          () => true,
          () => false,
        ),
      10_000,
      20,
    );
    await until('the side cache read the hosts again', () => side.host('host-x') !== undefined, 5000, 10);
    const lapsedC = await leaseLeft('host-c');
    const judgedAtOnce = side.host('host-c')?.up;
    skew += LEASE_MS; // a lease after the registry came back, host-c never renewed
    const judgedAfter = side.host('host-c')?.up;
    await until('both hosts renewed their lease', async () => (await leaseLeft('host-a')) > 0 && (await leaseLeft('host-b')) > 0, 10_000, 20);
    await sleep(2 * LEASE_MS); // and every view refreshed since
    await Promise.all([viaA.stop(), viaB.stop()]);
    for (const [name, h, page] of [
      ['through A', viaA, 'on B'],
      ['through B', viaB, 'on A'],
    ] as const) {
      const after = h.samples.filter((x) => x.at > back);
      const during = h.samples.filter((x) => x.at <= back);
      const bad = failed(after, page);
      console.log(`${name}: ${during.length} requests during the outage (${failed(during, page).length} failed), ${after.length} after (${bad.length} failed)`);
      assert.ok(after.length > 20, `${after.length} requests after the registry came back`);
      assert.is(bad.length, 0, `${name} after the registry came back: ${bad.length} of ${after.length} failed: ${summary(bad)}`);
      assert.is(failed(during, page).length, 0, `${name} during the outage: ${summary(failed(during, page))}`);
    }
    assert.ok(lapsedC < -LEASE_MS, `host-c's lease lapsed in the outage (${lapsedC} ms)`);
    assert.is(judgedAtOnce, true, 'a lease that ran out while nobody could renew it is not judged at once');
    assert.is(judgedAfter, false, 'a host that did not renew within a lease after the registry came back is down');
  } finally {
    await Promise.all([viaA.stop(), viaB.stop()]);
    await side.stop();
    await pool.query("DELETE FROM hosts WHERE name IN ('host-c', 'host-x')").catch(() => {});
    await pool.end();
  }
});

test('B cut off from the registry alone: its lease lapses, its channel answers, so its server is still served through A', async () => {
  const viaA = hammer(a, 'hic-b.localhost');
  const viaB = hammer(b, 'hic-a.localhost');
  try {
    await until('both clients are served before the fault', () => viaA.samples.length > 0 && viaB.samples.length > 0, 10_000, 10);
    relay.drop();
    const cut = performance.now();
    await until("B's lease lapsed", async () => (await leaseLeft('host-b')) < 0, 10_000, 50);
    const lapsed = performance.now();
    await sleep(2 * LEASE_MS); // A's view refreshed several times since
    assert.ok((await leaseLeft('host-b')) < 0, 'B is still cut off from the registry');
    assert.ok((await leaseLeft('host-a')) > 0, "A's lease runs");
    const aSeesB = a.daemon.registry!.placements.host('host-b')?.up;
    const own = await get(b, 'hic-b.localhost', '/');
    assert.is(own.body.toString(), 'on B', "B's own edge serves its server");
    await Promise.all([viaA.stop(), viaB.stop()]);
    console.log(`B cut off ${Math.round(performance.now() - cut)} ms, its lease lapsed ${Math.round(lapsed - cut)} ms after the cut`);
    for (const [name, h, page] of [
      ['through A', viaA, 'on B'],
      ['through B', viaB, 'on A'],
    ] as const) {
      const after = h.samples.filter((x) => x.at > cut);
      const bad = failed(after, page);
      console.log(`${name}: ${after.length} requests while B was cut off, ${bad.length} failed`);
      assert.ok(after.length > 20, `${after.length} requests`);
      assert.is(bad.length, 0, `${name}: ${bad.length} of ${after.length} failed: ${summary(bad)}`);
    }
    assert.is(aSeesB, true, 'A counts B up: its channel answers');
  } finally {
    relay.heal();
    await Promise.all([viaA.stop(), viaB.stop()]);
  }
  await until("B's lease runs again", async () => (await leaseLeft('host-b')) > 0, 10_000, 50);
});

test.run();
