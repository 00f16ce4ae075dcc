// The prestage of a running server's move (issue 38): two daemons on a real PostgreSQL registry,
// checkpoints in a real S3 store (Ceph RGW), a real runc server running an app. While the server
// still runs on A, A's running checkpoint is staged on B (a private file, every chunk verified)
// and nothing else changes there — no record, runtime, disk or placement — until A asks the
// adopt; then B patches only the chunks its final checkpoint changed, and the server's files are
// as before. A target whose prepare fails, or whose stage is gone by the adopt, makes the whole
// image as before: the move succeeds either way.

import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';
import { holdFinalCheckpoint } from './helpers/holdtake.js';

const RUN_SH = `#!/bin/bash\nexec python3 -m http.server 80 --directory /root/www\n`;

let cl: S3Cluster;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let srv: { id: string; slug: string; host: string };
let fileSha = '';
const hosts = new Map<string, TestDaemon>();

const env = (d: TestDaemon) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const move = (from: TestDaemon, to: string) => adminCli(['servers', 'move', srv.id, '--to', to, '--json'], env(from));
const holder = () => [...hosts.values()].find((d) => d.daemon.store.servers.get(srv.id));
const inServer = async (script: string) => {
  const r = await sh(holder()!.daemon.runtime, srv.id, script);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out.trim();
};
const placed = async () => (await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${srv.id}'`)).trim();
const logged = (d: TestDaemon, since: number, msg: string) => d.logs.slice(since).filter((l) => l.msg === msg && l.server === srv.id);

test.before(async () => {
  cl = await startS3Cluster(['host-a', 'host-b'], { proxy: { idleTimeout: 600_000, wakeTimeout: '30s' } });
  pg = cl.pg;
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  hosts.set('host-a', a).set('host-b', b);
  const slug = `ps${randomBytes(3).toString('hex')}`;
  const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  srv = { id: r.json.id, slug, host: `${slug}.localhost` };
  const w = await sh(
    a.daemon.runtime,
    srv.id,
    `mkdir -p /root/www && echo up > /root/www/index.html && cat > /root/run.sh <<'EOF'\n${RUN_SH}EOF\nchmod +x /root/run.sh && head -c 30000000 /dev/urandom > /root/data && sync`,
  );
  assert.is(w.code, 0, w.err);
  fileSha = await inServer('sha256sum /root/data | cut -d" " -f1');
  await until('the app answers on A', async () => ((await get(a, srv.host, '/')).status === 200 ? true : undefined), 30_000, 100);
});

test.after(async () => {
  await cl?.stop();
});

test('a running server’s checkpoint is staged on the target and nothing else changes there before the adopt; the adopt patches only what changed', async () => {
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
  const before = await placed();
  const seenA = a.logs.length;
  const seenB = b.logs.length;
  const hold = holdFinalCheckpoint(a);
  try {
    const moving = move(a, 'host-b');
    await hold.reached;
    // prepared, stopped on A, its final checkpoint not taken: B has the staged file and nothing else
    const st = b.daemon.moves.staging.has(srv.id);
    assert.ok(st?.done, 'a complete stage on B');
    assert.ok(existsSync(st!.path) && statSync(st!.path).size > 0, 'its staged file');
    assert.is(logged(b, seenB, 'a running server’s checkpoint staged for its move here').length, 1);
    assert.is(b.daemon.store.servers.getAny(srv.id), undefined, 'no record on B');
    assert.is(b.daemon.runtime.get(srv.id), undefined, 'no runtime on B');
    assert.not.ok(existsSync(join(b.dataDir, 'servers', srv.id)), 'no server dir on B');
    assert.is(await placed(), before, 'the placement as it was');
    hold.release();
    const r = await moving;
    assert.is(r.code, 0, r.stderr + r.stdout);
    const report = JSON.parse(r.stdout).move;
    assert.is(report.was, 'running');
    console.log(`  prestaged running move: held ${report.held_ms} ms (${JSON.stringify(report.held_phases_ms)}), the move took ${report.took_ms} ms`);
  } finally {
    hold.release();
    hold.restore();
  }
  const patched = logged(b, seenB, 'a moved server’s staged image patched');
  assert.is(patched.length, 1, 'the staged image was patched');
  const p = patched[0] as { fetched: number; chunks: number; zeroed: number };
  console.log(`  patched: ${p.fetched} of ${p.chunks} chunks fetched, ${p.zeroed} zeroed`);
  assert.ok(p.chunks >= 30 && p.fetched * 4 < p.chunks, `fetched ${p.fetched} of ${p.chunks} chunks`);
  assert.is(logged(a, seenA, 'the target did not stage the server’s checkpoint: its whole image is made at the hand-over').length, 0);
  assert.is(b.daemon.moves.staging.has(srv.id), undefined, 'the stage is used up');
  assert.equal(readdirSync(b.daemon.moves.staging.dir), [], 'no staged file left');
  assert.is(b.daemon.runtime.get(srv.id)?.state, 'running');
  assert.is(await inServer('sha256sum /root/data | cut -d" " -f1'), fileSha, 'its files as before');
  assert.is((await get(a, srv.host, '/')).status, 200);
});

test('a target whose prepare fails, or whose stage is gone by the adopt, makes the whole image: the move succeeds', async () => {
  // A's prepare fails: B moves it without a base
  const staging = a.daemon.moves.staging;
  const prepare = staging.prepare.bind(staging);
  staging.prepare = () => Promise.reject(new Error('the disk is full (test)'));
  const seenA = a.logs.length;
  const seenB = b.logs.length;
  try {
    const r = await move(b, 'host-a');
    assert.is(r.code, 0, r.stderr + r.stdout);
  } finally {
    staging.prepare = prepare;
  }
  assert.is(logged(b, seenB, 'the target did not stage the server’s checkpoint: its whole image is made at the hand-over').length, 1);
  assert.is(logged(a, seenA, 'a moved server’s staged image patched').length, 0);
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
  assert.is(await inServer('sha256sum /root/data | cut -d" " -f1'), fileSha);
  // staged on B, then its file removed before the adopt (as a restart would): made whole
  const hold = holdFinalCheckpoint(a);
  const seen2 = b.logs.length;
  try {
    const moving = move(a, 'host-b');
    await hold.reached;
    b.daemon.moves.staging.wipe();
    hold.release();
    const r = await moving;
    assert.is(r.code, 0, r.stderr + r.stdout);
  } finally {
    hold.release();
    hold.restore();
  }
  assert.is(logged(b, seen2, 'a moved server’s staged image was not used: made whole from its checkpoint').length, 1);
  assert.is(b.daemon.runtime.get(srv.id)?.state, 'running');
  assert.is(await inServer('sha256sum /root/data | cut -d" " -f1'), fileSha);
  assert.is((await get(b, srv.host, '/')).status, 200);
});

test.run();
