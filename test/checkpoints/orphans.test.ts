// Checkpoints of servers that no longer exist (issue 37 item 6): a delete killed before it removed
// the server's manifests leaves them in the store, and the next start drops the server's record
// without them. The start-up reconcile (and every collection's) removes them, so the collector
// takes their chunks — on a single box when this host's store has no record of the server but
// still the records of its checkpoints (a server being created has its pending record before
// anything, so it is kept; one the store never knew is left to the operator), in cluster mode
// only when the registry (a real PostgreSQL) places it on no host either and the manifest is older
// than the grace: another host's servers in the shared store are never touched. Real LMDB stores,
// the real directory blob store and engine, real sealed manifests and chunks.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { blobKeys, CheckpointEngine, Checkpoints, DirBlobStore, newCheckpointId } from '../../src/checkpoints/index.js';
import { ServerCheckpoints } from '../../src/hosting/checkpoints.js';
import { PendingWork } from '../../src/hosting/pending.js';
import { silentLogger } from '../../src/log/index.js';
import { RegistryNames, RegistryPool } from '../../src/registry/index.js';
import type { Runtime } from '../../src/runtime/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { initRegistry } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';

const MiB = 1 << 20;
const HOUR = 3_600_000;
const dirs: string[] = [];
const stores: Store[] = [];
const pools: RegistryPool[] = [];
let pg: TestPostgres | undefined;
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-orphans-'));
  dirs.push(d);
  return d;
};
test.after(async () => {
  for (const s of stores) await s.close().catch(() => undefined);
  for (const p of pools) await p.end();
  await pg?.stop();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const secret = { key: async () => Buffer.alloc(32, 7) };

/** One host: its LMDB store and hosting's checkpoints over `blobDir` (the shared store when two share it). */
function hostOf(blobDir: string, placed?: (id: string) => Promise<boolean>) {
  const store = openStore(tmp());
  stores.push(store);
  const engine = new CheckpointEngine({ store: new DirBlobStore(blobDir), secret });
  const service = new Checkpoints(engine, {});
  const checkpoints = new ServerCheckpoints(store, {} as Runtime, service, undefined, placed ? { placed } : {});
  return { store, engine, service, checkpoints };
}
type Host = ReturnType<typeof hostOf>;

/** A checkpoint of `serverId` in the store (its own random chunks), dated `createdAt`, with its record on `h`. */
async function checkpoint(h: Host, serverId: string, createdAt = Date.now(), record = true): Promise<string> {
  const image = join(tmp(), 'disk.img');
  writeFileSync(image, randomBytes(2 * MiB));
  const m = await h.engine.write(
    { id: newCheckpointId(createdAt), serverId, createdAt, kind: 'manual', settings: { tier: 'anonymous', image: 'debian', slug: serverId, runSh: false } },
    image,
  );
  if (record)
    await h.store.checkpoints.add({ id: m.id, serverId, accountId: 'acc_o', createdAt, kind: 'manual', sizeBytes: m.dataBytes, newBytes: m.newBytes });
  return m.id;
}

function server(h: Host, id: string, pending?: 'create') {
  if (!h.store.accounts.get('acc_o'))
    h.store.accounts.insert({ id: 'acc_o', keyHash: 'o'.padEnd(64, '0'), keyEnc: '', phone: null, createdIp: '192.0.2.1', createdAt: 0, balanceUsd: 0 });
  h.store.servers.insert({
    id,
    accountId: 'acc_o',
    slug: id.replace(/_/g, '-'),
    sshPublicKey: '',
    keyFingerprint: id,
    memoryBytes: 1 << 30,
    diskBytes: 1 << 30,
    neverSleep: false,
    suspended: false,
    flag: null,
    createdAt: 0,
    ...(pending ? { pending: { op: pending, by: 'this-run', until: Date.now() + HOUR } } : {}),
  });
}

const has = (h: Host, serverId: string, id: string) => h.engine.store.has(blobKeys.manifest(serverId, id));
const chunks = async (h: Host) => {
  let n = 0;
  for await (const _ of h.engine.store.list(blobKeys.chunkPrefix)) n++;
  return n;
};

test('single box: a server deleted by a daemon killed mid-delete leaves no manifest and no chunk once the next start reconciled and collected', async () => {
  const h = hostOf(tmp());
  server(h, 'srv_kept');
  server(h, 'srv_gone');
  const kept = await checkpoint(h, 'srv_kept');
  const gone = await checkpoint(h, 'srv_gone');
  // the delete of srv_gone was marked, then the daemon was killed before its checkpoints went
  assert.ok(h.store.beginDelete('srv_gone', 'killed-run', Date.now() + HOUR));
  // the next start: the unfinished delete is finished (its runtime part is gone: the record is dropped)
  const pending = new PendingWork({ store: h.store, runtime: {} as Runtime, log: silentLogger, release: async () => {} });
  assert.equal(pending.recover().servers, ['srv_gone']);
  assert.is(h.store.servers.getAny('srv_gone'), undefined);
  // a create under way now: its pending record is there before its first checkpoint
  server(h, 'srv_new', 'create');
  const fresh = await checkpoint(h, 'srv_new');
  // a server this store never had a record of (made after the state backup a data dir was rebuilt from)
  const stranger = await checkpoint(h, 'srv_stranger', Date.now() - 2 * HOUR, false);
  assert.is(await chunks(h), 8);

  const r = await h.checkpoints.reconcile(Date.now(), silentLogger);
  const gc = await h.service.collect();
  assert.is(r.orphans, 1);
  assert.not.ok(await has(h, 'srv_gone', gone), 'the deleted server’s manifest is gone');
  assert.equal(h.store.checkpoints.list('srv_gone'), [], 'and its record');
  assert.is(gc.removed, 2, 'its chunks are collected');
  assert.is(await chunks(h), 6);
  assert.ok(await has(h, 'srv_kept', kept), 'a server the store has keeps its checkpoint');
  assert.ok(await has(h, 'srv_stranger', stranger), 'a server the store never knew keeps its checkpoint (the operator’s to judge)');
  assert.ok(await has(h, 'srv_new', fresh), 'a server being created keeps its checkpoint');
});

test('cluster: only a server the registry places on no host loses its manifests (after the grace); another host’s in the shared store are kept', async () => {
  pg = await startPostgres();
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  pools.push(pool);
  await initRegistry(pool);
  const namesA = new RegistryNames(pool, 'host-a');
  const namesB = new RegistryNames(pool, 'host-b');
  const shared = tmp(); // the shared store (S3 in a cluster): one directory both hosts use here
  const a = hostOf(shared, async (id) => (await namesA.placement(id)) !== undefined);
  const b = hostOf(shared, async (id) => (await namesB.placement(id)) !== undefined);
  const old = Date.now() - 2 * HOUR;
  // a server of host A (placed there; B's store has no record of it)
  server(a, 'srv_on_a');
  await namesA.place({ serverId: 'srv_on_a', accountId: 'acc_o', slug: 'srv-on-a', publicIp: '192.0.2.10' });
  const onA = await checkpoint(a, 'srv_on_a', old);
  // a server of B deleted while B was killed mid-delete: its placement went first, its manifests stayed
  server(b, 'srv_gone');
  await namesB.place({ serverId: 'srv_gone', accountId: 'acc_o', slug: 'srv-gone', publicIp: '192.0.2.11' });
  const gone = await checkpoint(b, 'srv_gone', old);
  const recent = await checkpoint(b, 'srv_gone', Date.now());
  await namesB.remove('srv_gone');
  b.store.servers.remove('srv_gone');

  // host A's collection: srv_gone is no host's, and its old manifest is past the grace
  const r = await a.checkpoints.reconcile(Date.now(), silentLogger);
  assert.is(r.orphans, 1);
  assert.not.ok(await has(a, 'srv_gone', gone), 'the deleted server’s old manifest is removed, by any host');
  assert.ok(await has(a, 'srv_gone', recent), 'one younger than the grace waits');
  // host B's: srv_on_a is placed on A (B's store does not know it), so it is never touched
  const rb = await b.checkpoints.reconcile(Date.now(), silentLogger);
  assert.is(rb.orphans, 0);
  assert.ok(await has(b, 'srv_on_a', onA), 'another host’s server keeps its checkpoint');
  // the registry away: nothing is removed
  const away = hostOf(shared, async () => {
    throw new Error('registry unreachable');
  });
  const gone2 = await checkpoint(away, 'srv_gone2', old, false);
  assert.is((await away.checkpoints.reconcile(Date.now(), silentLogger)).orphans, 0);
  assert.ok(await has(away, 'srv_gone2', gone2));
});

test("one manifest that cannot be opened is passed over: the reconcile still lists the others' checkpoints", async () => {
  const blobs = tmp();
  const h = hostOf(blobs);
  server(h, 'srv_bad');
  server(h, 'srv_good');
  const bad = await checkpoint(h, 'srv_bad', Date.now() - HOUR, false);
  const good = await checkpoint(h, 'srv_good', Date.now() - HOUR, false);
  writeFileSync(join(blobs, blobKeys.manifest('srv_bad', bad)), 'not a sealed manifest'); // damaged in the store
  const r = await h.checkpoints.reconcile(Date.now(), silentLogger);
  assert.is(r.adopted, 1);
  assert.ok(h.store.checkpoints.get('srv_good', good), 'the readable one is listed');
  assert.is(h.store.checkpoints.get('srv_bad', bad), undefined);
});

test.run();
