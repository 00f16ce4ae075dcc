// No host is dead while any peer still reaches it (issue 38, schema 21), on a real PostgreSQL and
// injected time: each host's heartbeat writes how long ago it last reached each other host over the
// channel (hosts.heard); the hosts view reads every host's report (its heartbeat's age added) and
// the judging host counts a host silent only from the last time anyone reached it. Host-x's lease
// lapsed and host-a (the judge) cannot reach it, but host-c reports reaching it: host-x is dead only
// recoverAfter after host-c's last report of it, and a fresh report keeps it alive.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Contact, HostDirectory, RegistryPool, claimName } from '../../src/registry/index.js';
import { HostsView } from '../../src/registry/hostsview.js';
import { hostState } from '../../src/admin/cli-channel.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { startClusterRegistry } from './fixtures/twohosts.js';

const R = 60_000;
let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startClusterRegistry();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 3000 });
});
test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

const facts = (name: string) => ({ name, advertise: `127.0.0.1:${name.length}`, publicIp: '10.0.0.9', version: 'test', capacity: {} });

test("a host whose lease lapsed is dead only recoverAfter after the last peer's report of reaching it", async () => {
  for (const h of ['host-a', 'host-c', 'host-x'])
    await claimName(pool, facts(h), { instance: `ins_${h}`, run: `run_${h}`, fresh: false, held: false }, { leaseMs: 600_000, replace: false });
  await pg.sql(`UPDATE hosts SET lease_until = now() - interval '1 hour' WHERE name = 'host-x'`);
  const dir = new HostDirectory(pool, 600_000);
  // host-c reached host-x 2 s before its heartbeat; host-a never did
  assert.ok(await dir.renew({ ...facts('host-c'), heard: { 'host-x': 2000 } }, 'run_host-c'));
  assert.ok(await dir.renew({ ...facts('host-a'), heard: {} }, 'run_host-a'));
  assert.is(await pg.sql(`SELECT heard->>'host-x' FROM hosts WHERE name = 'host-c'`), '2000');

  let t = 1_000_000;
  const view = new HostsView(pool, { refreshMs: 1000, connectTimeoutMs: 1000, leaseMs: 600_000, now: () => t });
  await view.refresh();
  const x = view.host('host-x')!;
  assert.is(x.lease, false);
  assert.ok(x.peersHeardAt! <= t - 2000 && x.peersHeardAt! > t - 3000, `host-c's report, its heartbeat's age added: ${t - x.peersHeardAt!} ms ago`);
  assert.is(view.host('host-a')!.peersHeardAt, undefined, 'nobody reported reaching host-a');

  const contact = new Contact({ self: 'host-a', hosts: () => view.hosts(), registryUp: () => true, now: () => t, recoverAfterMs: R });
  const t0 = t;
  contact.tick(); // host-x first seen lapsed now; host-a never reaches it itself
  // half-way, host-c reports reaching host-x again (its heartbeat)
  t = t0 + R / 2;
  assert.ok(await dir.renew({ ...facts('host-c'), heard: { 'host-x': 0 } }, 'run_host-c'));
  await view.refresh();
  contact.tick();
  t = t0 + R + 1000;
  contact.tick();
  const v = contact.verdict('host-x');
  assert.ok(
    !v.dead && v.why === 'waiting' && v.inMs! <= R / 2 && v.inMs! > R / 2 - 2000,
    `lapsed and unreached here for recoverAfter, but host-c reached it since: ${JSON.stringify(v)}`,
  );
  t = t0 + R / 2 + R + 1000;
  assert.is(contact.verdict('host-x').dead, true, "recoverAfter after host-c's last report");

  // the operator's view (cluster status): when a peer last reached each host, and who is dead
  const rows = await dir.list();
  const rx = rows.find((h) => h.name === 'host-x')!;
  assert.ok(rx.reachedMs !== null && rx.reachedMs < 2000, `host-c reached host-x ${rx.reachedMs} ms ago`);
  assert.is(rows.find((h) => h.name === 'host-a')!.reachedMs, null, 'nobody reported reaching host-a');
  assert.is(hostState(rx, R), `down (dead in ${Math.ceil((R - rx.reachedMs!) / 1000)} s)`, 'lapsed an hour ago, but reached a moment ago');
  assert.is(hostState({ ...rx, reachedMs: R }, R), 'dead', 'lapsed an hour ago, reached recoverAfter ago');
  assert.is(hostState({ ...rx, reachedMs: null }, R), 'dead');
  assert.is(hostState({ ...rx, reachedMs: null }, 0), 'down', 'recoverAfter 0: never dead by itself');
  assert.is(
    hostState(
      rows.find((h) => h.name === 'host-c')!,
      R,
    ),
    'up',
  );
  // a host's report of itself is no report
  assert.ok(await dir.renew({ ...facts('host-x'), heard: { 'host-x': 0 } }, 'run_host-x').then(() => true));
  await pg.sql(`UPDATE hosts SET heard = '{}'::jsonb WHERE name = 'host-c'`);
  await view.refresh();
  assert.is(view.host('host-x')!.peersHeardAt, undefined);
});

test.run();
