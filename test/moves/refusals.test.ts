// Moves refused before anything changes (issue 38 item 1): two daemons on a real PostgreSQL
// registry whose checkpoints are each host's own directory (the default), servers as plain
// processes. `rootbox servers move` answers a clear error — the store is no shared one
// (move_needs_shared_store), the target is full by its lease (move_target_full), unknown
// (move_target_unknown) or this host (move_to_self, 400) — and the server stays where it was at
// the same epoch, serving; on a host that does not run it, the command says which host does. A
// target's refusal that another try does not change (it takes no moved servers) is move_refused,
// never the retryable move_failed a drain would try forever.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { AppError } from '../../src/errors.js';
import { startMoves } from '../../src/moves/index.js';
import { ask } from '../../src/moves/source.js';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { api, startClusterRegistry, startHost } from '../registry/fixtures/twohosts.js';

let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let id = '';
let onB = '';

const env = (d: TestDaemon) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const move = (from: TestDaemon, to: string) => adminCli(['servers', 'move', id, '--to', to], env(from));
const placed = async () => pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`);

test.before(async () => {
  pg = await startClusterRegistry();
  a = await startHost(pg, 'host-a');
  // B holds at most one server, and has it
  b = await startHost(pg, 'host-b', { hosting: { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 }, capacity: { servers: 1 } } });
  const made = await api(b, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  onB = made.json.id;
  const r = await api(a, 'POST', '/create');
  assert.is(r.status, 200, r.text);
  id = r.json.id;
  await until(
    'A sees B up with its room',
    async () =>
      a.daemon.registry!.placements.host('host-b')?.up && (await a.daemon.registry!.hosts.list()).find((h) => h.name === 'host-b')?.capacity.servers === 1,
    20_000,
    100,
  );
  assert.ok(a.daemon.channel, 'A has its channel');
});

test.after(async () => {
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

test('a move with checkpoints in the host’s own directory is refused: move_needs_shared_store, nothing changed', async () => {
  const before = await placed();
  const r = await move(a, 'host-b');
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stderr, /checkpoints\.store = s3:\/\//);
  assert.is(await placed(), before);
  assert.ok(a.daemon.store.servers.get(id));
  assert.is(b.daemon.store.servers.getAny(id), undefined);
});

test('the admin API answers each refusal with its code and status, nothing changed', async () => {
  const before = await placed();
  const rec = a.daemon.store.servers.get(id)!;
  /** A move through the moves of A's parts, with `store` as checkpoints.store (a shared one passes
   *  the store check: each refusal here comes before anything is read from it). */
  const refused = (to: string, store?: string) =>
    startMoves({ ...a.daemon, cfg: { ...a.cfg, checkpoints: { ...a.cfg.checkpoints, store } } })
      .move(rec, to)
      .then(
        () => undefined,
        (e: { code?: string; detail?: string }) => e,
      );
  assert.is((await refused('host-b'))?.code, 'move_needs_shared_store');
  const full = await refused('host-b', 's3://bucket/x');
  assert.is(full?.code, 'move_target_full', full?.detail);
  assert.match(full?.detail ?? '', /host-b holds its most servers \(1\)/);
  assert.is((await refused('host-nowhere', 's3://bucket/x'))?.code, 'move_target_unknown');
  const self = await refused('host-a', 's3://bucket/x');
  assert.is(self?.code, 'move_to_self', self?.detail);
  assert.is((self as AppError).kind, 'bad_request', '400, not 404');
  assert.is(await placed(), before);
  // on B, which does not run it: it says where it runs
  const r = await move(b, 'host-a');
  assert.is(r.code, 1);
  assert.match(r.stderr, /runs on host-a: run `rootbox servers move` there/);
  assert.is(await placed(), before);
});

test('a target that takes no moved servers (its checkpoints its own directory) refuses for good: move_refused (409, no Retry-After), not move_failed', async () => {
  const rec = b.daemon.store.servers.get(onB)!;
  const { pending: _, ...server } = rec;
  const body = {
    server: { ...server, flag: rec.flag ?? null },
    checkpoint: 'ckp_0000000000000000000000',
    epoch: 1,
    running: false,
    exposed: [],
    checkpoints: [],
    domains: [],
  };
  const e = await ask(a.daemon, 'host-b', body as never).then(
    () => undefined,
    (x: AppError) => x,
  );
  assert.is(e?.code, 'move_refused', e?.detail);
  assert.match(e?.detail ?? '', /not_configured/, e?.detail);
  assert.is(e?.kind, 'conflict');
  assert.is(e?.retryAfter, undefined);
  assert.ok(b.daemon.store.servers.get(onB), 'B keeps its server');
});

test('an operator’s suspension and resume are written to the registry’s settings of the server (schema 29: a recovery elsewhere keeps it suspended)', async () => {
  const row = () => pg.sql(`SELECT suspended || ' ' || coalesce(flag, '-') FROM server_settings WHERE server_id = '${onB}'`);
  assert.is(await row(), 'false -');
  const s = await adminCli(['servers', 'suspend', onB], env(b));
  assert.is(s.code, 0, s.stderr);
  // written off the answer's path (settingswriter.ts): soon after
  await until('the suspension in the registry', async () => (await row()) === 'true suspended_by_operator', 5000);
  const r = await adminCli(['servers', 'resume', onB], env(b));
  assert.is(r.code, 0, r.stderr);
  await until('the resume in the registry', async () => (await row()) === 'false -', 5000);
});

test('a delete on the source once the registry places the server on another host is refused: nothing deleted, its SSH key kept (the move’s last window)', async () => {
  const key = (await pg.sql(`SELECT count(*) FROM server_keys WHERE server_id = '${id}'`)) as string;
  assert.is(key, '1');
  const epoch = Number(await pg.sql(`SELECT epoch FROM placements WHERE server_id = '${id}'`));
  // what the target's moveHere writes, before the source removed its record
  await pg.sql(`UPDATE placements SET host = 'host-b', epoch = ${epoch + 1} WHERE server_id = '${id}'`);
  try {
    const rec = a.daemon.store.servers.get(id)!;
    const e = await a.daemon.hosting.core.servers.delete(rec).then(
      () => undefined,
      (x: AppError) => x,
    );
    assert.is(e?.code, 'placement_conflict', e?.detail);
    assert.match(e?.detail ?? '', /placed on host-b/);
    assert.ok(a.daemon.store.servers.get(id), 'the record is kept');
    assert.is(await pg.sql(`SELECT count(*) FROM server_keys WHERE server_id = '${id}'`), '1', 'its SSH key is kept');
    assert.is(await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`), `host-b ${epoch + 1}`);
  } finally {
    await pg.sql(`UPDATE placements SET host = 'host-a', epoch = ${epoch} WHERE server_id = '${id}'`);
  }
});

test.run();
