// The API's rate limits count a request another host forwards exactly once (issue 35 review,
// finding 1): two daemons on one real PostgreSQL registry, servers as plain processes on host-a,
// every request sent to host-b, which forwards those on host-a's servers over the channel before
// its own routes run. host-a counts them, by the key and by the client's address the channel
// carries; a server list, counted on host-b, is not counted again by the host-a part it asks for,
// nor a create host-b (without room for it) sends on to host-a.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { send, type Answer } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { clusterOpts, startClusterRegistry } from './fixtures/twohosts.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;

/** host-b holds one server: a create sent to it once it has one goes to host-a. */
async function host(name: string): Promise<TestDaemon> {
  const o = clusterOpts(pg, name, await freePort());
  const capacity = name === 'host-b' ? { capacity: { servers: 1 } } : {};
  return startTestDaemon({ ...o, hosting: { rateLimit: { perIpPerMinute: 30, createsPerIpPerHour: 200, perKeyPerMinute: 20 }, ...capacity } });
}

test.before(async () => {
  pg = await startClusterRegistry();
  a = await host('host-a');
  b = await host('host-b');
  for (const d of [a, b]) for (const name of ['host-a', 'host-b']) await until(`${name} up`, () => d.daemon.registry!.placements.host(name)?.up, 5000);
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await pg?.stop();
});

const call = (d: TestDaemon, method: string, path: string, o: { from?: string; key?: string } = {}): Promise<Answer> =>
  send(d.http, 'api.localhost', method, path, {
    from: o.from,
    body: method === 'POST' ? {} : undefined,
    headers: o.key ? { authorization: `Bearer ${o.key}` } : {},
  });
const summary = (all: Answer[]) => all.map((r) => `${r.status} ${r.json?.error ?? ''}`).join(', ');

/** A new account with one server on host-a, known to host-b's placement cache: its key and server id. */
async function serverOnA(from: string): Promise<{ key: string; id: string }> {
  const made = await call(a, 'POST', '/create', { from });
  assert.is(made.status, 200, made.text);
  const id = made.json.id as string;
  assert.ok(a.daemon.store.servers.get(id), 'made on host-a');
  await until('host-b knows where it runs', () => b.daemon.registry!.placements.byServer(id)?.host === 'host-a', 5000);
  return { key: made.json.api_key as string, id };
}

test("a key's requests forwarded to the server's host are counted there: 20 a minute, not unlimited", async () => {
  const { key, id } = await serverOnA('127.0.31.1');
  const all: Answer[] = [];
  // each from its own address: only the key's limit is in play
  for (let i = 0; i < 30; i++) all.push(await call(b, 'GET', `/servers/${id}`, { key, from: `127.0.31.${10 + i}` }));
  const ok = all.filter((r) => r.status === 200).length;
  assert.ok(ok >= 20 && ok <= 22, `20 allowed at once (and what refilled meanwhile): ${summary(all)}`);
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'rate_limited', r.text);
});

test("an address's forwarded requests are counted on the server's host by the address the channel carries", async () => {
  const servers = [await serverOnA('127.0.32.1'), await serverOnA('127.0.32.2'), await serverOnA('127.0.32.3')];
  const all: Answer[] = [];
  // 15 a key (under its 20), 45 from one address (over its 30)
  for (let i = 0; i < 45; i++) {
    const s = servers[i % 3];
    all.push(await call(b, 'GET', `/servers/${s.id}`, { key: s.key, from: '127.0.32.50' }));
  }
  const ok = all.filter((r) => r.status === 200).length;
  assert.ok(ok >= 30 && ok <= 32, `30 allowed at once (and what refilled meanwhile): ${summary(all)}`);
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'rate_limited', r.text);
});

test("a server list counts once: host-a's part of it, asked by host-b, is not counted again", async () => {
  const { key, id } = await serverOnA('127.0.33.1');
  const all: Answer[] = [];
  for (let i = 0; i < 20; i++) all.push(await call(b, 'GET', '/servers', { key, from: `127.0.33.${10 + i}` }));
  assert.is(all.filter((r) => r.status === 200).length, 20, summary(all));
  for (const r of all) {
    const s = (r.json.servers as { id: string; state: string }[]).find((x) => x.id === id);
    assert.ok(s && s.state !== 'unavailable', `host-a listed its server itself: ${r.text}`);
  }
  const over = await call(b, 'GET', '/servers', { key, from: '127.0.33.40' });
  assert.is(over.status, 429, over.text);
});

test('a create host-b sends on to host-a is counted by host-b alone', async () => {
  const onB = await call(b, 'POST', '/create', { from: '127.0.34.1' });
  assert.is(onB.status, 200, onB.text);
  assert.ok(b.daemon.store.servers.get(onB.json.id), 'host-b holds its one server');
  // the registry statements each host sends for the shared buckets of this source
  const taken = new Map<TestDaemon, string[]>();
  const undo = [a, b].map((d) => {
    const seen: string[] = [];
    taken.set(d, seen);
    const pool = d.daemon.registry!.pool;
    const query = pool.query;
    pool.query = ((sql: string, params: unknown[] = []) => (
      /rootbox_take_tokens/.test(sql) && String(params[0]).includes('127.0.34.2') && seen.push(String(params[0])),
      query.call(pool, sql, params)
    )) as typeof pool.query;
    return () => void (pool.query = query);
  });
  let made;
  try {
    made = await call(b, 'POST', '/create', { from: '127.0.34.2' });
  } finally {
    for (const u of undo) u();
  }
  assert.is(made.status, 200, made.text);
  assert.ok(a.daemon.store.servers.get(made.json.id), 'made on host-a');
  assert.equal(taken.get(b)!.sort(), ['create:127.0.34.2', 'ip:127.0.34.2'], 'host-b counted its address and its creates');
  assert.equal(taken.get(a), [], 'host-a did not count them again');
});

test.run();
