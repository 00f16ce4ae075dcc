// A server that moved off this host and back (issue 38, low-severity review item 2). The source's
// side (moves/source.ts) runs in this process with the registry's real names (RegistryNames on a
// real PostgreSQL) and the channel's answer given to it: host-b, the target, takes the placement
// from the epoch the source read and answers. The server then runs on host-b (its epoch bumped
// there) and moves back here, where this host's placement write commits but its answer is lost
// (moves/target.ts takes it by reading the placement: `takenHere`), so this host's names never
// learn the new epoch from their own write. The wake fence's compare-and-set (names.startAt) must
// then start it from its placement here, not compare against the epoch this host wrote before the
// server left (refused: "placed here at an epoch this host did not write").

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import type { MoveSource } from '../../src/moves/source.js';
import { RegistryNames, RegistryPool } from '../../src/registry/index.js';
import type { ServerRecord } from '../../src/store/index.js';
import { initRegistry } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { fakeSource } from './helpers/fakesource.js';

const GiB = 1024 ** 3;
const ID = 'srv_0123456789ab';
const rec = { id: ID, accountId: 'acc_1', slug: 'one', memoryBytes: GiB, diskBytes: GiB } as ServerRecord;

let pg: TestPostgres;
let pool: RegistryPool;

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  for (const h of ['host-a', 'host-b'])
    await pg.sql(
      `INSERT INTO hosts (name, advertise, public_ip, version, started_at, heartbeat_at, lease_until, instance)
       VALUES ('${h}', '127.0.0.1:1', '127.0.0.1', 'test', now(), now(), now() + interval '1 hour', 'ins_${h}')`,
    );
});
const dataDir = mkdtempSync(join(tmpdir(), 'rbx-moveback-'));
test.after(async () => {
  await pool?.end();
  await pg?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** host-a's move source over its real names; host-b's side takes the placement and answers. */
function source(names: RegistryNames, target: RegistryNames): MoveSource {
  return fakeSource({
    dataDir,
    names,
    state: 'sleeping',
    forwardApi: async (_to, _req, res, _info, o) => {
      const ask = JSON.parse(o.body.toString()) as { server: { id: string; slug: string }; epoch: number };
      const epoch = await target.moveHere(ask.server.id, ask.server.slug, '127.0.0.2', ask.epoch);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ epoch, exposed_ports: [], state: 'sleeping' }));
    },
  }).source;
}

test('a server moved away and back, its placement write here answered lost: the fence starts it from its placement here, not from the epoch written before it left', async () => {
  const a = new RegistryNames(pool, 'host-a', { instance: 'ins_host-a', held: true });
  const b = new RegistryNames(pool, 'host-b', { instance: 'ins_host-b', held: true });
  assert.ok(await a.claim(rec.slug, ID));
  assert.is((await a.place({ serverId: ID, accountId: rec.accountId, slug: rec.slug, publicIp: '127.0.0.1' })).epoch, 1);
  assert.equal(await a.startAt(ID), { started: 2 }, 'ran here');

  const moved = await source(a, b)
    .move(rec, 'host-b')
    .then(
      (r) => r.epoch,
      (e: unknown) => (isAppError(e) ? e.code : String(e)),
    );
  assert.is(moved, 3, 'host-b took it from the epoch host-a read');
  assert.equal(await b.startAt(ID), { started: 4 }, 'it runs on host-b');
  assert.equal(await a.startAt(ID), { host: 'host-b', epoch: 4, lost: false, mine: false }, 'host-a does not start it while host-b has it');

  // back here: this instance's placement write commits, its answer never reaches the names that
  // serve the fence (the target's side then reads the placement: takenHere)
  const lostAnswer = new RegistryNames(pool, 'host-a', { instance: 'ins_host-a', held: true });
  assert.is(await lostAnswer.moveHere(ID, rec.slug, '127.0.0.1', 4), 5);

  assert.equal(await a.startAt(ID), { started: 6 }, "started here, compared against its placement's epoch");
  assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${ID}'`), 'host-a 6');
});

test.run();
