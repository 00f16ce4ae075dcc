// The rules of a dead host's recovery (moves/recover.ts, issue 38 review M6, M8, L4, L5, L1) on a
// real PostgreSQL registry prepared by `cluster init` (the placements, keys and settings the
// recovery reads, its lease and outcomes): the recovery runs in this process with the hosts rows,
// the dead verdict, the store's manifests and the channel to the target given to it, so that each
// rule is seen on its own —
//   - an operator-suspended server is recovered suspended, with its flag, and not started (M6:
//     schema 29 keeps the suspension in server_settings);
//   - a server whose recovery failed is not tried again on every round: it waits, doubled per
//     failure; the operator's `cluster recover` tries it at once (M8);
//   - a target that never answers ends its server's recovery as failed at the deadline, and the
//     host is free to recover again (L4);
//   - a draining host is never chosen as a target (L5);
//   - a moved checkpoint record carries no writtenAt of the source's clock to the target (L1).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Res } from '../../src/http/index.js';
import { createLogger, silentLogger } from '../../src/log/index.js';
import { Recovery } from '../../src/moves/recover.js';
import type { MovesDeps } from '../../src/moves/index.js';
import { AdoptRequest } from '../../src/moves/wire.js';
import { RegistryPool, RegistrySettings } from '../../src/registry/index.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { startClusterRegistry } from '../registry/fixtures/twohosts.js';

const GiB = 1024 ** 3;
const ID = 'srv_0123456789ab';
const room = (memGiB: number) => ({
  servers: 0,
  serversMax: 0,
  memoryFreeBytes: 64 * GiB,
  diskFreeBytes: 500 * GiB,
  memoryRoomBytes: memGiB * GiB,
  diskRoomBytes: 100 * GiB,
});

let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startClusterRegistry();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 5000 });
  await pg.sql(
    `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip, instance) VALUES ('${ID}', 'host-c', 4, 'acc_1', 'one', '127.0.0.1', 'ins_host-c')`,
  );
  await pg.sql(`INSERT INTO server_keys (server_id, fingerprint, public_key, host) VALUES ('${ID}', 'fp1', 'ssh-ed25519 AAAA one', 'host-c')`);
});

test.after(async () => {
  await pool?.end();
  await pg?.stop();
});

interface World {
  /** host-a (this one), host-b, host-c (dead): the room each reports, host-b's drain. */
  roomA: number;
  roomB: number;
  bDrains: boolean;
  /** What host-b does with the adopt request: answer it, or never. */
  answer: 'ok' | 'never';
  asked: AdoptRequest[];
  lists: number;
  clock: number;
}

function recovery(w: World, o: { askWaitMs?: number; retryMs?: number } = {}): Recovery {
  const row = (name: string, up: boolean, memGiB: number, drain = false) => ({
    name,
    up,
    leaseLeftMs: up ? 10_000 : -60_000,
    capacity: room(memGiB),
    drain: drain ? { since: new Date(), moved: 0, failed: {} } : null,
  });
  const manifest = { id: 'ckp_00000000001111111111ab', serverId: ID, createdAt: 1000, kind: 'auto', imageBytes: GiB, dataBytes: 1, newBytes: 1 };
  const d = {
    cfg: { cluster: { recoverAfter: 1000, lease: 1000 }, checkpoints: { store: 's3://bucket/x' } },
    log: silentLogger,
    now: () => w.clock,
    runtime: { list: () => [] },
    registry: {
      pool,
      host: 'host-a',
      placements: { hosts: () => [{ name: 'host-a' }, { name: 'host-b' }, { name: 'host-c' }], sync: async () => {} },
      contact: { verdict: (h: string) => ({ dead: h === 'host-c' }), reachedAgo: () => undefined },
      hosts: { list: async () => [row('host-a', true, w.roomA), row('host-b', true, w.roomB, w.bDrains), row('host-c', false, 100)] },
    },
    channel: {
      forwardApi: (_to: string, _req: unknown, res: Res, _info: unknown, opts: { body: Buffer }) => {
        w.asked.push(JSON.parse(opts.body.toString('utf8')) as AdoptRequest);
        if (w.answer === 'never') return new Promise<void>(() => {});
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ epoch: 5, exposed_ports: [], state: 'sleeping' }));
        return Promise.resolve();
      },
    },
    hosting: {
      core: {
        checkpoints: { engine: { available: true, list: async () => (w.lists++, [manifest]) } },
        accounts: { book: { byId: async () => ({ id: 'acc_1', balanceUsd: 0 }) } },
        domains: { token: () => 'token' },
      },
    },
  } as unknown as MovesDeps;
  return new Recovery(d, process.env.DBG ? (createLogger({ sink: (l) => console.log(JSON.stringify(l)) }) as never) : silentLogger, o);
}

const world = (o: Partial<World> = {}): World => ({ roomA: 0, roomB: 0, bDrains: false, answer: 'ok', asked: [], lists: 0, clock: 1_000_000, ...o });

test('an operator-suspended server is recovered suspended, with its flag, and not started (schema 29)', async () => {
  await pg.sql(
    `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip) VALUES ('srv_0000000000aa', 'host-x', 1, 'acc_1', 'x', '127.0.0.1')`,
  );
  // the host a server is placed on writes its settings; another host's row is left alone
  await new RegistrySettings(pool, 'host-c').put([{ serverId: ID, neverSleep: true, exposed: [8080], suspended: true, flag: 'suspended_by_operator' }]);
  await new RegistrySettings(pool, 'host-c').put([{ serverId: 'srv_0000000000aa', neverSleep: false, exposed: [], suspended: true, flag: 'x' }]);
  assert.is(await pg.sql(`SELECT count(*) FROM server_settings WHERE server_id = 'srv_0000000000aa'`), '0');
  const w = world({ roomB: 8 });
  const report = await recovery(w).recoverHost('host-c', 'operator');
  assert.equal(report.failed, []);
  assert.is(w.asked.length, 1);
  const s = w.asked[0].server;
  assert.is(s.suspended, true, 'still suspended');
  assert.is(s.flag, 'suspended_by_operator');
  assert.is(w.asked[0].running, false, 'a suspended never_sleep server is not started');
  assert.equal(w.asked[0].exposed, [8080]);
  // a resumed one (its host wrote it) comes back unsuspended and runs
  await new RegistrySettings(pool, 'host-c').put([{ serverId: ID, neverSleep: true, exposed: [8080] }]);
  const w2 = world({ roomB: 8 });
  await recovery(w2).recoverHost('host-c', 'operator');
  assert.is(w2.asked[0].server.suspended, false);
  assert.is(w2.asked[0].server.flag, null);
  assert.is(w2.asked[0].running, true);
});

test('a domain whose certificate order its dead host left under way comes back waiting for its DNS check (ordered again), an active one active', async () => {
  await pg.sql(
    `INSERT INTO custom_domains (domain, server_id, account_id, host, state) VALUES ('order.example.net', '${ID}', 'acc_1', 'host-c', 'issuing'), ('live.example.net', '${ID}', 'acc_1', 'host-c', 'active')`,
  );
  try {
    const w = world({ roomB: 8 });
    await recovery(w).recoverHost('host-c', 'operator');
    assert.equal(
      w.asked[0].domains.map((x) => [x.domain, x.state]),
      [
        ['live.example.net', 'active'],
        ['order.example.net', 'pending_dns'],
      ],
    );
  } finally {
    await pg.sql(`DELETE FROM custom_domains WHERE server_id = '${ID}'`);
  }
});

test('a failed recovery waits before the next round tries it, doubled per failure; the operator tries at once', async () => {
  const w = world(); // no host has room
  const r = recovery(w, { retryMs: 10_000 });
  await r.tick();
  assert.is(w.lists, 1, 'tried once');
  await r.tick();
  await r.tick();
  assert.is(w.lists, 1, 'not again on the next rounds');
  w.clock += 10_000;
  await r.tick();
  assert.is(w.lists, 2, 'again once its wait ran out');
  w.clock += 10_000;
  await r.tick();
  assert.is(w.lists, 2, 'the wait doubled');
  w.clock += 10_000;
  await r.tick();
  assert.is(w.lists, 3);
  const report = await r.recoverHost('host-c', 'operator');
  assert.is(w.lists, 4, 'the operator does not wait');
  assert.match(report.failed[0]?.why ?? '', /no up host has room/);
  // room again: the next round once the wait ran out recovers it, and forgets its failures
  w.roomB = 8;
  w.clock += 80_000; // its fourth failure (the operator's): 80 s
  await r.tick();
  assert.is(w.asked.length, 1);
});

test('a target that never answers: the server fails at the deadline and the host may recover again', async () => {
  const w = world({ roomB: 8, answer: 'never' });
  const r = recovery(w, { askWaitMs: 200 });
  const late = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 5000).unref());
  const report = await Promise.race([r.recoverHost('host-c', 'operator'), late]);
  assert.ok(report !== 'hung', 'the recovery ended');
  assert.match(report.failed[0]?.why ?? '', /did not answer within/);
  w.answer = 'ok';
  const again = await r.recoverHost('host-c', 'operator');
  assert.is(again.recovered[0]?.to, 'host-b', 'not refused recovery_busy');
});

test('a draining host is never a target, whatever its room', async () => {
  const w = world({ roomB: 50, bDrains: true });
  const report = await recovery(w).recoverHost('host-c', 'operator');
  assert.is(w.asked.length, 0, 'host-b was not asked');
  assert.match(report.failed[0]?.why ?? '', /no up host has room/);
});

test("a moved checkpoint record reaches the target without the source's writtenAt", () => {
  const req = {
    server: {
      id: ID,
      accountId: 'acc_1',
      slug: 'one',
      sshPublicKey: 'ssh-ed25519 AAAA one',
      keyFingerprint: 'fp1',
      memoryBytes: GiB,
      diskBytes: GiB,
      neverSleep: false,
      suspended: false,
      flag: null,
      createdAt: 1,
    },
    checkpoint: 'ckp_x',
    epoch: 1,
    running: false,
    exposed: [],
    checkpoints: [{ id: 'ckp_x', serverId: ID, accountId: 'acc_1', createdAt: 5, kind: 'auto', sizeBytes: 1, newBytes: 1, writtenAt: 9_999_999 }],
    domains: [],
  };
  const parsed = AdoptRequest.parse(req);
  assert.is('writtenAt' in parsed.checkpoints[0], false);
  assert.is(parsed.checkpoints[0].createdAt, 5);
});

test.run();
