// A box that has not joined yet, started in cluster mode while the registry cannot be reached
// (src/joining.ts joinUntilDone): its start does not fail — it serves its own sites, answers 503
// registry_unavailable for what needs the registry, and tries the join again with back-off by the
// injected clock (1 s, then 2 s…) — and once the registry is back it joins with everything it has:
// its key works, its account is in the registry. Metering (which prices with the registry's
// totals) starts only after the join.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Clock } from '../../src/clock.js';
import { send } from '../http/contract.js';
import { ManualClock } from '../helpers/clock.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { until } from '../helpers/wait.js';
import { startClusterRegistry } from './fixtures/twohosts.js';

const API = 'api.localhost';
let pg: TestPostgres;
let gate: { port: number; open: boolean; server: Server; sockets: Socket[] };
const dataDir = mkdtempSync(join(tmpdir(), 'rbx-joinwait-'));
let host: TestDaemon | undefined;

/** A TCP door to the registry: closed, it drops every connection at once (PostgreSQL away); open, it forwards them. */
async function startGate(to: number): Promise<typeof gate> {
  const sockets: Socket[] = [];
  const g = { port: await freePort(), open: false, server: undefined as unknown as Server, sockets };
  g.server = createServer((s) => {
    if (!g.open) return void s.destroy();
    const up = connect({ host: '127.0.0.1', port: to });
    sockets.push(s, up);
    s.on('error', () => up.destroy());
    up.on('error', () => s.destroy());
    s.pipe(up).pipe(s);
  });
  await new Promise<void>((r) => g.server.listen(g.port, '127.0.0.1', r));
  return g;
}

test.before(async () => {
  pg = await startClusterRegistry();
  gate = await startGate(pg.port);
});
test.after(async () => {
  await host?.stop().catch(() => {});
  // a daemon's stop leaves its servers running (as runc's do); the test's plain processes end here
  if (host) await (host.daemon.runtime as unknown as ProcessRuntime).stopAll();
  for (const s of gate?.sockets ?? []) s.destroy();
  gate?.server.close();
  await pg?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

test('a box started in cluster mode with the registry away keeps serving, tries its join again with back-off, and joins once the registry is back', async () => {
  // the single box: an account with a server, its key
  const box = await startTestDaemon({ dataDir });
  const made = await send(box.http, API, 'POST', '/create', { body: {} });
  assert.is(made.status, 200, made.text);
  const key: string = made.json.api_key;
  const account = box.daemon.store.servers.get(made.json.id)!.accountId;
  await box.daemon.stop(); // its data dir stays
  await (box.daemon.runtime as unknown as ProcessRuntime).stopAll(); // and its server's process goes: no handle left

  const manual = new ManualClock();
  const waits: number[] = [];
  // the join's waits (1 s, then 2 s); the moves part's loops on the same clock wait longer (5 s, 10 s)
  const join = (ms: number) => ms < 5000 && waits.push(ms);
  const clock: Clock = { now: () => manual.now(), every: (ms, fn) => manual.every(ms, fn), after: (ms, fn) => (join(ms), manual.after(ms, fn)) };
  const [http, channel] = [await freePort(), await freePort()];
  const starting = startTestDaemon(
    {
      dataDir,
      http: { host: '127.0.0.1', port: http },
      cluster: {
        registry: pg.url.replace(`:${pg.port}/`, `:${gate.port}/`),
        host: 'host-w',
        listen: `127.0.0.1:${channel}`,
        advertise: `127.0.0.1:${channel}`,
        connectTimeout: '1s',
        statementTimeout: '3s',
        lease: '3s',
      },
    },
    {},
    undefined,
    clock,
  );
  let failed: unknown;
  starting.catch((e: unknown) => (failed = e ?? 'failed'));
  await until('the join waits to try again', () => failed ?? (waits.length === 1 || undefined));
  assert.is(failed, undefined, `the start failed: ${String(failed)}`);
  // not joined: the API says so (503, Retry-After), the health check answers
  const early = await send(http, API, 'GET', '/credits', { headers: { authorization: `Bearer ${key}` } });
  assert.is(early.status, 503, early.text);
  assert.is(early.json.error, 'registry_unavailable');
  assert.is((await send(http, API, 'GET', '/healthz')).status, 200);

  manual.advance(1000); // the second try meets the registry away too: a longer wait
  await until('the second wait', () => failed ?? (waits.length === 2 || undefined));
  assert.is(failed, undefined, `the start failed: ${String(failed)}`);
  assert.equal(waits, [1000, 2000]);
  assert.is(await pg.sql(`SELECT count(*) FROM accounts WHERE id = '${account}'`), '0', 'nothing joined yet');

  gate.open = true; // the registry is back
  manual.advance(2000);
  host = await starting;
  assert.ok(
    host.logs.some((l) => l.msg === 'joined the cluster: this box’s records are in the registry'),
    'the box joined',
  );
  assert.ok(host.daemon.store.joined.get(), 'the mark is written');
  // metering prices with the registry's totals: nothing of it before the registry has the box's accounts
  const msgs = host.logs.map((l) => String(l.msg));
  const joinedAt = msgs.indexOf('joined the cluster: this box’s records are in the registry');
  const before = msgs.slice(0, joinedAt).filter((m) => /metering/.test(m));
  assert.equal(before, [], 'no metering before the join');
  assert.ok(msgs.indexOf('metering started') > joinedAt, 'metering started after the join');
  assert.is(await pg.sql(`SELECT count(*) FROM accounts WHERE id = '${account}'`), '1', 'its account is in the registry');
  const credits = await send(http, API, 'GET', '/credits', { headers: { authorization: `Bearer ${key}` } });
  assert.is(credits.status, 200, credits.text);
});

test.run();
