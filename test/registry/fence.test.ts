// Fencing at wake: two daemons on one real PostgreSQL registry. A sleeping server of host A whose
// placement the registry moves to host B (a newer epoch there) is not started by A — not by a
// command (exec wakes it), nor by a restart: 503 server_moved, the server stays asleep and A logs
// why. Placed on A again (by A, from the epoch it read), it wakes, and the start bumps its epoch.
// Every start compares the epoch A last wrote: placed on A still but at an epoch A did not write
// (another instance under A's name, a change A missed), it is not started either. With the
// registry unreachable, A wakes its own sleeping
// server from what it has (the fence only refuses on a positive "elsewhere" or "deleted"), and
// once its heartbeat found the registry unreachable it does not try to read it for a start. Its
// placement deleted in the registry (a tombstone: deleted while A was away), A does not start it
// either: 404 server_not_found. The fence is the runtime's start guard, so what is counted is
// what the runtime started.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // the fence is the daemon's, not the container's
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { initRegistry } from '../helpers/cluster.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let id: string;
let key: string;

const opts = (host: string) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s' },
  hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } },
});
const api = (d: TestDaemon, method: string, path: string, body?: unknown) =>
  send(d.http, 'api.localhost', method, path, { body, headers: { authorization: `Bearer ${key}` } });
const exec = () => api(a, 'POST', `/servers/${id}/exec`, { command: 'echo awake' });
/** The start of a log line of a start made without the registry's answer. */
const STARTED_UNREAD =
  /^(placement not read before a start; starting from what this host has|registry unreachable; starting from what this host has, its placement not read)$/;
const state = () => a.daemon.runtime.get(id)?.state;
/** Servers the runtime of A started (processes spawned). */
const spawned = () => (a.daemon.runtime as ProcessRuntime).starts;
async function asleep(): Promise<void> {
  await a.daemon.runtime.stop(id);
  assert.is(state(), 'sleeping');
}

test.before(async () => {
  pg = await startPostgres();
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(p);
  await p.end();
  a = await startTestDaemon(opts('host-a'));
  b = await startTestDaemon(opts('host-b'));
  const made = await send(a.http, 'api.localhost', 'POST', '/create', { body: {} });
  assert.is(made.status, 200, made.text);
  ({ id, api_key: key } = made.json as { id: string; api_key: string });
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`), 'host-a 1');
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await pg?.stop();
});

test('a sleeping server the registry moved to another host at a newer epoch is not started: 503 server_moved, logged', async () => {
  await asleep();
  await pg.sql(`UPDATE placements SET host = 'host-b', epoch = epoch + 1 WHERE server_id = '${id}'`);
  const starts = spawned();
  const r = await exec();
  assert.is(r.status, 503, r.text);
  assert.is(r.json.error, 'server_moved');
  assert.ok(Number(r.headers['retry-after']) >= 1);
  const restart = await api(a, 'POST', `/servers/${id}/restart`);
  assert.is(restart.status, 503, restart.text);
  assert.is(restart.json.error, 'server_moved');
  assert.is(state(), 'sleeping', 'never started');
  assert.is(spawned(), starts, 'no process started');
  const line = a.logs.find((l) => l.msg === 'not starting a server the registry places on another host');
  assert.ok(line, 'logged');
  assert.is(line!.server, id);
  assert.is(line!.host, 'host-b');
  assert.is(line!.epoch, 2);
});

test('placed on this host again (by it, from the epoch it read), the same server wakes; the start bumps its epoch', async () => {
  const [accountId, slug] = (await pg.sql(`SELECT account_id || ' ' || slug FROM placements WHERE server_id = '${id}'`)).split(' ');
  const names = a.daemon.registry!.names;
  const again = { serverId: id, accountId, slug, publicIp: '127.0.0.1' };
  const moved = await names.place(again).then(
    () => 'taken',
    (e: { code?: string }) => e.code,
  );
  assert.is(moved, 'placement_conflict', 'not taken back from host-b without the epoch it read');
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`), 'host-b 2');
  assert.is((await names.place(again, 2)).epoch, 3);
  const r = await exec();
  assert.is(r.status, 200, r.text);
  assert.match(String(r.json.stdout), /awake/);
  assert.is(state(), 'running');
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`), 'host-a 4', 'compared and bumped by the start');
});

test('a sleeping server placed on this host at an epoch it did not write is not started: 503 server_moved, logged', async () => {
  await asleep();
  // another writer under this host's name (a clone of it, a change this host missed) moved the epoch on
  await pg.sql(`UPDATE placements SET epoch = epoch + 1 WHERE server_id = '${id}'`);
  const starts = spawned();
  const r = await exec();
  assert.is(r.status, 503, r.text);
  assert.is(r.json.error, 'server_moved');
  assert.is(state(), 'sleeping', 'never started');
  assert.is(spawned(), starts, 'no process started');
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`), 'host-a 5', 'left as the registry has it');
  const line = a.logs.find((l) => l.msg === 'not starting a server the registry places here at an epoch this host did not write');
  assert.ok(line, 'logged');
  assert.is(line!.server, id);
  assert.is(line!.epoch, 5);
});

test('with the registry unreachable, the host wakes its own sleeping server from what it has', async () => {
  await asleep();
  await pg.halt();
  const unread = () => a.logs.filter((l) => l.server === id && STARTED_UNREAD.test(String(l.msg))).map((l) => l.msg);
  try {
    // at once: the fence's read fails (or the heartbeat found it first)
    const r = await exec();
    assert.is(r.status, 200, r.text);
    assert.is(state(), 'running');
    assert.is(unread().length, 1, 'logged');
    // once the heartbeat found it unreachable, the fence does not try to read it
    await until("A's heartbeat finds the registry unreachable", () => !a.daemon.registry!.up, 5000);
    await asleep();
    const again = await exec();
    assert.is(again.status, 200, again.text);
    assert.is(state(), 'running');
    assert.is(unread()[1], 'registry unreachable; starting from what this host has, its placement not read');
  } finally {
    await pg.start();
  }
  await until('A reaches the registry again', () => a.daemon.registry!.up, 10_000);
});

test('a sleeping server whose placement the registry deleted (a tombstone) is not started: 404 server_not_found, logged', async () => {
  await asleep();
  await pg.sql(`DELETE FROM placements WHERE server_id = '${id}'`);
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE kind = 'placement' AND key = '${id}' AND payload IS NULL`), '1');
  const starts = spawned();
  const r = await exec();
  assert.is(r.status, 404, r.text);
  assert.is(r.json.error, 'server_not_found');
  const restart = await api(a, 'POST', `/servers/${id}/restart`);
  assert.is(restart.status, 404, restart.text);
  assert.is(restart.json.error, 'server_not_found');
  assert.is(state(), 'sleeping', 'never started');
  assert.is(spawned(), starts, 'no process started');
  assert.ok(a.logs.some((l) => l.msg === 'not starting a server the registry deleted' && l.server === id));
});

test.run();
