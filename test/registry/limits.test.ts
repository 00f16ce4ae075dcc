// The hosting API's limits hold across hosts and under races (issue 35 item 4): two daemons on one
// real PostgreSQL registry, servers as plain processes, requests sent to both at once.
//   - 16 anonymous creates at once from one address, half to each host: exactly 3 servers;
//   - an account capped at 2 servers, creates with its key sent to both hosts at once: 2 in all;
//   - an account capped at 2 running commands, commands on its server of each host at once: 2 run;
//   - a key's request rate counted by both hosts together; tokens given back (a lapsed lease's) fill the bucket up to its burst;
//   - reservations do not outlive their work: none left after the creates and commands ended, one
//     whose create never committed expires (or goes when its host starts again), and commands of a
//     host whose lease lapsed no longer count.
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

/** Host `host` with the caps under test; its registry pool waits up to 3 s for a connection (8
 *  creates at once on a loaded 2-core machine otherwise time out opening new ones: 503). */
async function host(name: string): Promise<TestDaemon> {
  const o = clusterOpts(pg, name, await freePort());
  return startTestDaemon({
    ...o,
    cluster: { ...o.cluster, connectTimeout: '3s' },
    hosting: {
      maxServersPerAccount: 2,
      exec: { maxPerAccount: 2 },
      rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200, perKeyPerMinute: 20 },
    },
  });
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

const call = (d: TestDaemon, method: string, path: string, o: { from?: string; key?: string; body?: unknown } = {}): Promise<Answer> =>
  send(d.http, 'api.localhost', method, path, { from: o.from, body: o.body, headers: o.key ? { authorization: `Bearer ${o.key}` } : {} });
const summary = (all: Answer[]) => all.map((r) => `${r.status} ${r.json?.error ?? ''}`).join(', ');
const holds = async (kind: string) => Number(await pg.sql(`SELECT count(*) FROM quota_holds WHERE kind = '${kind}' AND expires_at > now()`));

test('16 concurrent anonymous creates from one address, 8 to each host, make exactly 3 servers', async () => {
  const all = await Promise.all(Array.from({ length: 16 }, (_, i) => call(i % 2 ? b : a, 'POST', '/create', { from: '127.0.30.1', body: {} })));
  assert.is(all.filter((r) => r.status === 200).length, 3, summary(all));
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'ip_limit', r.text);
  const placed = await pg.sql(`SELECT count(*) FROM placements p JOIN accounts x ON x.id = p.account_id WHERE x.created_ip = '127.0.30.1' AND x.phone IS NULL`);
  assert.is(placed, '3');
  await until('no reservation outlives its create', async () => (await holds('server')) === 0, 5000, 50);
});

test('an account capped at 2 servers gets exactly 2 from creates sent to both hosts at once', async () => {
  const first = await call(a, 'POST', '/create', { from: '127.0.30.2', body: {} });
  assert.is(first.status, 200, first.text);
  const key = first.json.api_key as string;
  const all = await Promise.all(Array.from({ length: 8 }, (_, i) => call(i % 2 ? b : a, 'POST', '/create', { from: '127.0.30.2', key, body: {} })));
  assert.is(all.filter((r) => r.status === 200).length, 1, summary(all));
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'server_limit', r.text);
  const id = await pg.sql(`SELECT account_id FROM placements WHERE server_id = '${first.json.id}'`);
  assert.is(await pg.sql(`SELECT count(*) FROM placements WHERE account_id = '${id}'`), '2');
});

test('an account capped at 2 running commands runs 2 of 6 sent to its servers on both hosts at once', async () => {
  const made = await call(a, 'POST', '/create', { from: '127.0.30.3', body: {} });
  assert.is(made.status, 200, made.text);
  const key = made.json.api_key as string;
  const onB = await call(b, 'POST', '/create', { from: '127.0.30.3', key, body: {} });
  assert.is(onB.status, 200, onB.text);
  assert.ok(a.daemon.store.servers.get(made.json.id) && b.daemon.store.servers.get(onB.json.id), 'one server on each host');
  const exec = (d: TestDaemon, id: string) => call(d, 'POST', `/servers/${id}/exec`, { key, body: { command: ['sleep', '1.5'] } });
  const all = await Promise.all([0, 1, 2].flatMap(() => [exec(a, made.json.id), exec(b, onB.json.id)]));
  assert.is(all.filter((r) => r.status === 200).length, 2, summary(all));
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'too_many_commands', r.text);
  assert.is(await holds('exec'), 0, 'each command gave its reservation back when it ended');
  const again = await exec(b, onB.json.id);
  assert.is(again.status, 200, again.text);
});

test("a key's request rate is counted by both hosts together; most requests take no registry round trip for it", async () => {
  const made = await call(a, 'POST', '/create', { from: '127.0.30.4', body: {} });
  assert.is(made.status, 200, made.text);
  const seen: unknown[][] = [];
  const undo = [a, b].map((d) => {
    const pool = d.daemon.registry!.pool;
    const query = pool.query;
    pool.query = ((sql: string, params: unknown[] = []) => (
      /rootbox_take_tokens/.test(sql) && seen.push(params),
      query.call(pool, sql, params)
    )) as typeof pool.query;
    return () => void (pool.query = query);
  });
  const all: Answer[] = [];
  try {
    for (let i = 0; i < 30; i++) all.push(await call(i % 2 ? b : a, 'GET', '/servers', { key: made.json.api_key }));
  } finally {
    for (const u of undo) u();
  }
  const ok = all.filter((r) => r.status === 200).length;
  assert.ok(ok >= 20 && ok <= 22, `20 allowed at once (and what refilled meanwhile), not 20 per host: ${summary(all)}`);
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'rate_limited', r.text);
  const byAddress = seen.filter((p) => String(p[0]).startsWith('ip:')).length;
  assert.ok(byAddress <= 2, `the address's limit (1000 a minute) took its tokens once per host, not per request: ${byAddress}`);
});

test('tokens a host gives back go into the shared bucket, never above its burst', async () => {
  const q = a.daemon.registry!.quotas;
  assert.is((await q.take('test:give', 10, 0, 4)).granted, 4);
  await q.give('test:give', 3, 10);
  assert.is((await q.take('test:give', 10, 0, 20)).granted, 9, '10 − 4 + 3');
  await q.give('test:give', 100, 10);
  assert.is((await q.take('test:give', 10, 0, 20)).granted, 10, 'no more than the burst');
});

test('a reservation whose create never committed expires; commands of a host whose lease lapsed no longer count', async () => {
  const q = a.daemon.registry!.quotas;
  const claim = { accountId: 'acc_ghost', maxPerAccount: 1, maxPerIp: 3, ttlMs: 300 };
  assert.is(await q.reserveServer({ ...claim, serverId: 'srv_ghost1' }), undefined);
  assert.is(await q.reserveServer({ ...claim, serverId: 'srv_ghost2' }), 'account', 'the first one counts while its create may still commit');
  // the one taken once the first expired is held long: what follows must not depend on how slow the machine is
  await until('the reservation expires', async () => (await q.reserveServer({ ...claim, serverId: 'srv_ghost3', ttlMs: 3_600_000 })) === undefined, 5000, 100);
  await pg.sql(
    `INSERT INTO quota_holds (kind, holder, account_id, host, expires_at) VALUES ('exec', 'exe_dead', 'acc_ghost', 'host-gone', now() + interval '1 hour')`,
  );
  assert.ok(await q.reserveExec('acc_ghost', 'exe_live', 1, 60_000), 'a command of a host with no lease is not counted');
  assert.not.ok(await q.reserveExec('acc_ghost', 'exe_live2', 1, 60_000), "this host's own command is");
  assert.is(await q.reserveServer({ ...claim, serverId: 'srv_ghost4', ttlMs: 3_600_000 }), 'account');
  assert.is(await q.releaseOwn(), 3, "at a start, the host's reservations of its earlier run go (two creates, one command)");
  assert.is(await pg.sql(`SELECT count(*) FROM quota_holds WHERE host = 'host-a'`), '0');
  assert.is(await pg.sql(`SELECT count(*) FROM quota_holds WHERE host = 'host-gone'`), '1', "another host's stay");
});

test.run();
