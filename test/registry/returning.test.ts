// A host returning with servers the registry now places on another host at a newer epoch (issue
// 38: a move or recovery while it was away), one daemon with runc servers on a real PostgreSQL:
// B has three servers; while B is stopped, two of them are re-placed on host-a at the next epoch
// (as a recovery writes it) — one whose disk has not changed since its checkpoint, one written
// after its checkpoint. Back, B starts neither (the wake fence), removes the first's copy (its
// container, disk and records here; its placement, slug and checkpoints stay the new owner's),
// keeps the second's disk aside in <dataDir>/lost+found with a note (the file written after the
// checkpoint readable in the image), says so in the log, `rootbox status` and `rootbox doctor`,
// and keeps serving the third, which never moved.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { statusView } from '../../src/admin/status.js';
import { keptAsideCheck } from '../../src/ops/index.js';
import { claimName, RegistryPool } from '../../src/registry/index.js';
import { ContainerRuntime, keptAside } from '../../src/runtime/index.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

let pg: TestPostgres;
let pool: RegistryPool;
let b: TestDaemon;
let dataDir = '';
const srv: Record<'saved' | 'unsaved' | 'stays', { id: string; api_key: string }> = {} as never;

const hosting = { rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 }, anonServersPerIp: 20 };

async function write(s: { id: string; api_key: string }, path: string, body: string): Promise<void> {
  const w = await api(b, 'PUT', `/servers/${s.id}/files?path=${path}`, { key: s.api_key, body, headers: { 'content-type': 'application/octet-stream' } });
  assert.is(w.status, 200, w.text);
}

test.before(async () => {
  pg = await startClusterRegistry();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 3000 });
  // host-a: a host of the cluster that took B's servers over while B was away
  const facts = { name: 'host-a', advertise: '127.0.0.1:1', publicIp: '10.0.0.9', version: 'test', capacity: {} };
  await claimName(pool, facts, { instance: 'ins_host-a', run: 'run_host-a', fresh: false, held: false }, { leaseMs: 600_000, replace: false });
});
test.after(async () => {
  await b?.stop();
  await pool?.end();
  await pg?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const placement = async (id: string) => pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`);

test('a returning host removes its copies of servers placed elsewhere at a newer epoch, keeps aside the one written after its checkpoint, and starts neither', async () => {
  b = await startHost(pg, 'host-b', { hosting });
  if (!(b.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  for (const [name, slug] of [
    ['saved', 'ret-saved'],
    ['unsaved', 'ret-unsaved'],
    ['stays', 'ret-stays'],
  ] as const) {
    const r = await api(b, 'POST', '/create', { body: { subdomains: [slug] } });
    assert.is(r.status, 200, r.text);
    srv[name] = r.json as { id: string; api_key: string };
  }
  // both asleep when B goes away (as its self-fence leaves them): their disks written no more
  for (const name of ['saved', 'unsaved'] as const) {
    await write(srv[name], '/root/before.txt', `${name} before its checkpoint`);
    if (name === 'saved') await b.daemon.runtime.stop(srv[name].id);
    const c = await api(b, 'POST', `/servers/${srv[name].id}/checkpoints`, { key: srv[name].api_key });
    assert.is(c.status, 201, c.text);
  }
  await write(srv.unsaved, '/root/after.txt', 'written after the checkpoint');
  await b.daemon.runtime.stop(srv.unsaved.id);
  const cp = b.daemon.store.checkpoints.list(srv.unsaved.id)[0];
  assert.ok(b.daemon.runtime.filesChangedAt!(srv.unsaved.id)! > cp.writtenAt!, 'the unsaved one written since');
  assert.ok(b.daemon.runtime.filesChangedAt!(srv.saved.id)! <= b.daemon.store.checkpoints.list(srv.saved.id)[0].writtenAt!, 'the saved one unchanged since');
  const cfg = b.cfg;
  dataDir = cfg.dataDir;
  // B stops (its containers keep running, as a production daemon's do); meanwhile host-a takes two of its servers
  await b.daemon.stop();
  for (const name of ['saved', 'unsaved'] as const)
    await pg.sql(`UPDATE placements SET host = 'host-a', instance = 'ins_host-a', epoch = epoch + 1, placed_at = now() WHERE server_id = '${srv[name].id}'`);
  const moved = { saved: await placement(srv.saved.id), unsaved: await placement(srv.unsaved.id) };
  const checkpointsInStore = (id: string) => readdirSync(join(dataDir, 'checkpoints', 'manifests', id)).length;
  const storeBefore = checkpointsInStore(srv.unsaved.id);

  b = await startHost(pg, 'host-b', { dataDir, hosting, runtime: cfg.runtime, cluster: cfg.cluster });
  await until('B is joined', () => b.logs.some((l) => l.msg === 'joined the cluster'), 60_000);
  const gone = b.logs.find((l) => l.msg === 'stale copies of servers placed on another host removed') as
    { removed: string[]; keptAside: string[]; left: string[] } | undefined;
  assert.ok(gone, 'the reconcile says what it removed');
  assert.equal(gone.removed.sort(), [srv.saved.id, srv.unsaved.id].sort());
  assert.equal(gone.keptAside, [srv.unsaved.id]);
  assert.equal(gone.left, []);
  // nothing of them runs or remains here; what is shared is the new owner's, untouched
  for (const name of ['saved', 'unsaved'] as const) {
    const id = srv[name].id;
    assert.is(b.daemon.runtime.get(id), undefined, `${name}: no runtime here`);
    assert.is(b.daemon.store.servers.get(id), undefined, `${name}: no record here`);
    assert.not.ok(existsSync(join(dataDir, 'servers', id)), `${name}: its server dir is gone`);
    assert.is(await placement(id), moved[name], `${name}: placement as host-a wrote it`);
    assert.is(await pg.sql(`SELECT count(*) FROM slugs WHERE server_id = '${id}'`), '1', `${name}: its slug still held`);
  }
  assert.is(checkpointsInStore(srv.unsaved.id), storeBefore, "its checkpoints stay in the store (the new owner's)");
  const runc = (await run('runc', ['--root', join(dataDir, 'runc'), 'list', '-q'])).stdout;
  assert.not.ok(runc.includes(srv.saved.id) || runc.includes(srv.unsaved.id), 'no container of theirs');
  // the one that stayed serves as before
  assert.is(b.daemon.store.servers.get(srv.stays.id)?.id, srv.stays.id);
  const ls = await api(b, 'GET', `/servers/${srv.stays.id}`, { key: srv.stays.api_key });
  assert.is(ls.status, 200, ls.text);

  // the kept copy: its note, and the file written after the checkpoint in its image
  const kept = keptAside(dataDir);
  assert.is(kept.length, 1);
  assert.is(kept[0].server, srv.unsaved.id);
  assert.is(kept[0].slug, 'ret-unsaved');
  assert.is(kept[0].placedOn, 'host-a');
  assert.ok(kept[0].diskWrittenAt > kept[0].checkpointAt!);
  const mnt = mkdtempSync(join(tmpdir(), 'rbx-kept-'));
  try {
    execFileSync('mount', ['-o', 'loop,ro', join(dataDir, 'lost+found', kept[0].image), mnt]);
    try {
      const upper = join(mnt, 'upper', 'root');
      assert.is(readFileSync(join(upper, 'after.txt'), 'utf8'), 'written after the checkpoint');
    } finally {
      execFileSync('umount', [mnt]);
    }
  } finally {
    rmSync(mnt, { recursive: true, force: true });
  }
  assert.ok(b.logs.some((l) => l.level === 'error' && String(l.msg).includes('kept aside') && l.server === srv.unsaved.id));
  const view = statusView({ ...b.daemon, cfg: b.cfg } as never, { running: false, detail: 'test' });
  assert.equal(
    view.kept_aside.map((k) => [k.server, k.placed_on]),
    [[srv.unsaved.id, 'host-a']],
  );
  const row = keptAsideCheck(b.cfg);
  assert.ok(row && !row.ok && row.detail.includes(srv.unsaved.id), 'a doctor row names it');
});

test.run();
