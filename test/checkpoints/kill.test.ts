// kill -9 during a checkpoint, an upload, a restore, a fork and a collection (issue 37 item 6):
// the real daemon as a process (ProcDaemon) with a real runc server, its checkpoint store in S3 on
// a real Ceph RGW behind a proxy that holds a chosen request of the store (helpers/holdproxy.ts),
// so each SIGKILL lands at a point, not at a moment: after the disk copy (its first store write
// held), after k chunks uploaded, after the manifest (the pending marker's removal held), during
// a restore's materialize (after k chunks read), right after a restore's swap (the image renamed
// over the disk), during a fork's materialize, once a fork's root is mounted (its server booting,
// not yet committed), and during a collection's sweep. k is drawn from a seeded PRNG
// (ROOTBOX_KILL_SEED repeats a run). After every restart, the state is the old one or the new one,
// whole: the server runs (as before), its file is byte-identical (sha256) to before
// or to the checkpoint restored, no staged or captured image is left, the listed checkpoints are
// exactly the store's manifests, every chunk a manifest names is there, no marker or lock of the
// killed run is left, and the collector has removed every chunk no manifest names (no orphan
// waits for ever); a fork cut off left no server; a checkpoint after a collection cut off is not
// held by its lock.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { CheckpointEngine, hostSecret, openS3BlobStore, type BlobStore } from '../../src/checkpoints/index.js';
import { api } from '../hosting/helpers/killload.js';
import { mountsUnder, ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { rng } from '../helpers/rng.js';
import { startS3, type TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { HoldProxy, type StoreRequest } from './helpers/holdproxy.js';

const SEED = Number(process.env.ROOTBOX_KILL_SEED ?? Math.floor(Math.random() * 2 ** 31));
const PREFIX = 'box';
const MiB = 1 << 20;
let s3: TestS3;
let bucket = '';
let proxy: HoldProxy;
let d: ProcDaemon;
let blobs: BlobStore;
let reader: CheckpointEngine;
let id = '';
let key = '';
const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

test.before(async () => {
  s3 = await startS3();
  bucket = await s3.bucket();
  Object.assign(process.env, s3.env); // the daemon's environment: where S3 credentials are read
  proxy = new HoldProxy(s3.endpoint, `/${bucket}/${PREFIX}/`);
  await proxy.start();
  d = new ProcDaemon({
    config: {
      hosting: { rateLimit: { perIpPerMinute: 100_000, perKeyPerMinute: 100_000, createsPerIpPerHour: 1000 } },
      proxy: { idleTimeout: '1h' },
      checkpoints: {
        store: `s3://${bucket}/${PREFIX}`,
        s3: { endpoint: proxy.url, connectTimeout: '2s', timeout: '60s', maxAttempts: 1 },
        interval: 0, // no automatic checkpoint beside the ones the test takes
        manualPerServer: { anonymous: 50 },
      },
    },
  });
  const settings = { region: 'us-east-1', endpoint: s3.endpoint, connectTimeout: 2000, timeout: 20_000, maxConnections: 8, maxAttempts: 2 };
  blobs = openS3BlobStore(`s3://${bucket}/${PREFIX}`, settings);
  reader = new CheckpointEngine({ store: blobs, secret: hostSecret(d.dataDir) });
});
test.after(async () => {
  await d?.remove();
  await blobs?.close();
  await proxy?.stop();
  await s3?.stop();
  for (const [k, v] of [
    ['AWS_ACCESS_KEY_ID', saved.id],
    ['AWS_SECRET_ACCESS_KEY', saved.secret],
  ] as const)
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

const call = (method: string, path: string, body?: unknown) => api(d.http, method, path, { key, ...(body === undefined ? {} : { body }) });

/** A command in the server (wakes it when asleep); its stdout, trimmed. */
async function exec(command: string, server = id): Promise<string> {
  const r = await call('POST', `/servers/${server}/exec`, { command, timeout: 120 });
  assert.is(r.status, 200, JSON.stringify(r.body));
  assert.is(r.body.exit_code, 0, `${command}: ${r.body.stderr}`);
  return String(r.body.stdout).trim();
}
const dataSha = (server = id) => exec(`sha256sum /root/data | cut -d' ' -f1`, server);
/** New random contents for /root/data (every chunk of it new to the store); its sha256. */
const fresh = (mib = 8) => exec(`head -c ${mib * MiB} /dev/urandom > /root/data && sync && sha256sum /root/data | cut -d' ' -f1`);

async function checkpoint(): Promise<string> {
  const r = await call('POST', `/servers/${id}/checkpoints`);
  assert.is(r.status, 201, JSON.stringify(r.body));
  return r.body.id;
}

async function keysUnder(prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const { key: k } of blobs.list(prefix)) out.push(k);
  return out.sort();
}

/** What is wrong with the store and the records now (empty: consistent). */
async function storeProblems(servers: string[]): Promise<string[]> {
  const problems: string[] = [];
  const pending = await keysUnder('pending/');
  if (pending.length) problems.push(`pending markers left: ${pending}`);
  if ((await keysUnder('gc/')).length) problems.push('a collector’s lock is left');
  const chunks = new Set((await keysUnder('chunks/')).map((k) => k.split('/').pop()!));
  const named = new Set<string>();
  for (const k of await keysUnder('manifests/')) {
    const [, srv, cid] = k.split('/');
    const m = await reader.read(srv, cid);
    for (const [, c] of m!.chunks) {
      named.add(c);
      if (!chunks.has(c)) problems.push(`checkpoint ${cid} names chunk ${c.slice(0, 12)}, not in the store`);
    }
  }
  const orphans = [...chunks].filter((c) => !named.has(c));
  if (orphans.length) problems.push(`${orphans.length} chunks no manifest names`);
  for (const srv of servers) {
    const listed = await api(d.http, 'GET', `/servers/${srv}/checkpoints`, { key });
    const ids = (listed.body.checkpoints as { id: string }[]).map((c) => c.id).sort();
    const manifests = (await keysUnder(`manifests/${srv}/`)).map((k) => k.split('/').pop()!);
    if (ids.join() !== manifests.join()) problems.push(`${srv}: listed [${ids}], manifests in the store [${manifests}]`);
  }
  return problems;
}

/** After a restart: the account's servers are `servers`, the file is one of `shas`, and the
 *  store and records agree (waiting for the start's collection). */
async function consistent(what: string, servers: string[], shas: string[]): Promise<string> {
  const listed = await call('GET', '/servers');
  assert.equal(((listed.body.servers as { id: string }[]) ?? []).map((s) => s.id).sort(), [...servers].sort(), `${what}: the account's servers`);
  // running, as before every kill (a restore cut off included): reconcile brought it back, no exec woke it
  const state = await call('GET', `/servers/${id}`);
  assert.is(state.body.state, 'running', `${what}: the server's state`);
  const dirs = readdirSync(join(d.dataDir, 'servers')).sort();
  assert.equal(dirs, [...servers].sort(), `${what}: the servers' directories on the host`);
  const sha = await dataSha();
  assert.ok(shas.includes(sha), `${what}: /root/data is neither the old state nor the new one`);
  for (const f of readdirSync(join(d.dataDir, 'servers', id)))
    assert.not.ok(/^disk\.(ckp|img\.new|frozen)/.test(f), `${what}: ${f} left in the server's directory`);
  let last: string[] = [];
  const ok = await until(`${what}: store consistent`, async () => (last = await storeProblems(servers)).length === 0, 30_000, 250).catch(() => false);
  assert.ok(ok, `${what}: ${last.join('; ')}`);
  return sha;
}

const isChunk = (r: StoreRequest) => r.key.startsWith('chunks/');

/** `p`, or a failure naming `what` after `ms`. */
const within = <T>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, no) => setTimeout(() => no(new Error(`timed out waiting for ${what}`)), ms).unref())]);

/** Starts `op` (an API call the kill cuts off), waits for `point`, SIGKILLs the daemon, starts it again. */
async function killAt(op: () => Promise<unknown>, point: Promise<unknown>): Promise<void> {
  const answered = op();
  await point;
  await d.kill();
  await answered;
  proxy.release();
  await d.start();
}

test(`kill -9 at seeded points of checkpoint, upload, restore, fork and collection: old state or new, nothing orphaned (seed ${SEED})`, async () => {
  const rnd = rng(SEED);
  const pick = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  await d.start();
  const c = await api(d.http, 'POST', '/create');
  assert.is(c.status, 200, JSON.stringify(c.body));
  ({ id, api_key: key } = c.body);
  const servers = [id];
  const shaOf = new Map<string, string>();
  let cur = await fresh();
  const first = await checkpoint();
  shaOf.set(first, cur);
  const log: string[] = [];
  const t0 = Date.now();

  // 1. a checkpoint killed after its disk copy, before its first write to the store
  cur = await fresh();
  await killAt(
    () => call('POST', `/servers/${id}/checkpoints`),
    within(
      proxy.hold((r) => r.method === 'PUT' && r.key.startsWith('pending/')),
      120_000,
      'the checkpoint’s first store write',
    ),
  );
  cur = await consistent('after the disk copy', servers, [cur]);
  log.push('after the disk copy');

  // 2. killed after k chunks uploaded (of the ≥ 8 new ones)
  let k = pick(1, 6);
  await killAt(
    () => call('POST', `/servers/${id}/checkpoints`),
    proxy.hold((r) => r.method === 'PUT' && isChunk(r), k),
  );
  await consistent(`after ${k} chunks uploaded`, servers, [cur]);
  log.push(`after ${k} chunks uploaded`);

  // 3. killed after its manifest, before the checkpoint's record and answer: it is the new state
  cur = await fresh();
  await killAt(
    () => call('POST', `/servers/${id}/checkpoints`),
    proxy.hold((r) => r.method === 'DELETE' && r.key.startsWith('pending/')),
  );
  await consistent('after the manifest', servers, [cur]);
  const listed = (await call('GET', `/servers/${id}/checkpoints`)).body.checkpoints as { id: string }[];
  assert.is(listed.length, 2, 'the checkpoint whose manifest was written is listed');
  const adopted = listed[0].id;
  shaOf.set(adopted, cur);
  log.push('after the manifest');

  // 4. a restore killed during its materialize, after k chunks read: the old disk
  k = pick(1, 5);
  const before = cur;
  await killAt(
    () => call('POST', `/servers/${id}/restore`, { checkpoint: first }),
    proxy.hold((r) => r.method === 'GET' && isChunk(r), k),
  );
  await consistent(`restore, after ${k} chunks read`, servers, [before]);
  log.push(`restore after ${k} chunks read`);

  // 5. a restore killed right after its swap (the image renamed over the disk): the new disk,
  // restored from the checkpoint whose record the kill of 3 had cut off
  cur = await fresh();
  const img = join(d.dataDir, 'servers', id, 'disk.img');
  const ino = statSync(img).ino;
  await killAt(
    () => call('POST', `/servers/${id}/restore`, { checkpoint: adopted }),
    until('the swap', () => statSync(img, { throwIfNoEntry: false })?.ino !== ino, 120_000, 1),
  );
  cur = await consistent('restore, after the swap', servers, [shaOf.get(adopted)!]);
  log.push('restore after the swap');

  // 6. a fork killed during its materialize: no server made
  k = pick(1, 5);
  await killAt(
    () => call('POST', `/servers/${id}/fork`, { checkpoint: first }),
    proxy.hold((r) => r.method === 'GET' && isChunk(r), k),
  );
  await consistent(`fork, after ${k} chunks read`, servers, [cur]);
  log.push(`fork after ${k} chunks read`);

  // 6b. a fork killed once its disk is in place and mounted (its server booting, not yet
  // committed): no server, or — when its commit beat the kill — a whole one, the checkpoint's
  const known = new Set(readdirSync(join(d.dataDir, 'servers')));
  await killAt(
    () => call('POST', `/servers/${id}/fork`, { checkpoint: first }),
    until('the fork’s root mounted', () => mountsUnder(d.dataDir).some((m) => m.endsWith('/rootfs') && !known.has(m.split('/').at(-2)!)), 120_000, 1),
  );
  const forks = ((await call('GET', '/servers')).body.servers as { id: string }[]).map((x) => x.id).filter((x) => !servers.includes(x));
  for (const f of forks) {
    assert.is(await dataSha(f), shaOf.get(first), 'a fork whose commit beat the kill is the checkpoint’s, whole');
    servers.push(f);
  }
  await consistent('fork, its root mounted', servers, [cur]);
  log.push(`fork with its root mounted (${forks.length ? 'committed before the kill' : 'none made'})`);

  // 7. a collection killed during its sweep: the chunks of a checkpoint cut off (killed after k
  // uploaded) are swept at the next start, whose first chunk delete is held and killed
  cur = await fresh();
  k = pick(1, 6);
  const cut = proxy.hold((r) => r.method === 'PUT' && isChunk(r), k);
  const answered = call('POST', `/servers/${id}/checkpoints`);
  await cut;
  await d.kill();
  await answered;
  proxy.release();
  const sweep = proxy.hold((r) => r.method === 'DELETE' && isChunk(r));
  await d.start();
  await within(sweep, 60_000, 'the start’s collection sweeping the cut-off checkpoint’s chunks');
  await d.kill();
  proxy.release();
  await d.start();
  await consistent(`collection, after ${k} chunks of a cut-off checkpoint`, servers, [cur]);
  const started = Date.now();
  const again = await checkpoint();
  assert.ok(Date.now() - started < 30_000, `a checkpoint after a killed collection took ${Date.now() - started} ms`);
  shaOf.set(again, cur);
  log.push('during a sweep');

  // last: everything listed restores byte-exact
  for (const cid of [first, adopted]) {
    const r = await call('POST', `/servers/${id}/restore`, { checkpoint: cid });
    assert.is(r.status, 200, JSON.stringify(r.body));
    assert.is(await dataSha(), shaOf.get(cid));
  }
  console.log(`  ${log.length + 1} kills (seed ${SEED}) in ${Math.round((Date.now() - t0) / 1000)} s: ${log.join(', ')}`);
});

test.run();
