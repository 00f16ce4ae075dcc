// Draining a host (issue 38 item 2): three daemons on a real PostgreSQL registry with their
// checkpoints in a real S3 store (Ceph RGW, test/helpers/s3.ts) and four real runc servers on
// host-a — three asleep, one running an app; host-c has the most room but drains too. `rootbox
// cluster drain host-a` (run on host-b: the mark is the registry's) while the store is down: every
// move fails and `cluster status` says why (a server the operator deletes meanwhile leaves the
// count); host-a takes no create (it goes to host-b, never to host-c) and no move to it. host-a's
// daemon restarts and resumes the drain; once the store is back the failed moves are tried again,
// host-a restarts once more mid-drain (the move under way finishes, the rest move after the start),
// and every server ends on host-b, serving its page through both edges (HTTPS too) with the same
// files, the running one running; status shows 3 moved, 0 left, 0 failed. `cluster undrain`
// reopens host-a to creates.

import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createLogger } from '../../src/log/index.js';
import { startDaemon, type Daemon } from '../../src/main.js';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { adminCli } from '../helpers/admincli.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { parseExposition, sampleValue } from '../helpers/prom.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { startS3, type TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from '../registry/fixtures/clients.js';
import { api, clusterOpts, startClusterRegistry } from '../registry/fixtures/twohosts.js';

let s3: TestS3;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
/** A host with more room than host-b, draining itself: no server and no create goes to it. */
let c: TestDaemon;
/** host-a after its restart (stopped and cleaned up by the test itself). */
let again: Daemon | undefined;
type Srv = { id: string; slug: string; page: string; sha: string; running: boolean };
const servers: Srv[] = [];
/** A fourth server of host-a, deleted by the operator while the drain fails: its failure goes with it. */
let doomed: Srv;
const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

const env = (d: Pick<TestDaemon, 'dataDir'>) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const placed = async (id: string) => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${id}'`)).trim();
type StatusHost = { name: string; servers: number; drain: { moved: number; failed: Record<string, { why: string; attempts: number }> } | null };
const status = async () => {
  const r = await adminCli(['cluster', 'status', '--json'], env(b));
  assert.is(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as { hosts: StatusHost[] }).hosts.find((h) => h.name === 'host-a')!;
};

async function hostOf(
  name: string,
  over: Record<string, unknown>,
  hosting: Record<string, unknown> = {},
  cluster: Record<string, unknown> = {},
): Promise<TestDaemon> {
  const o = clusterOpts(pg, name, await freePort());
  return startTestDaemon({ ...o, ...over, hosting: { ...o.hosting, ...hosting }, cluster: { ...o.cluster, drainRetry: '1s', ...cluster } });
}

/** host-a's daemon stopped (its containers keep running, as a production daemon's do; its moves under way finish). */
const stopA = () => a.daemon.stop();
/** host-a's daemon started again on its data dir; its log lines. */
async function startA(): Promise<Record<string, unknown>[]> {
  const logs: Record<string, unknown>[] = [];
  again = await startDaemon(a.cfg, createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) }));
  a = { ...a, daemon: again as TestDaemon['daemon'], http: again.edge.ports.http, https: again.edge.ports.https, logs };
  await until(
    'host-a resumes its drain',
    () => logs.some((l) => l.msg === 'draining this host: it takes no creates, its servers move to the others'),
    30_000,
    50,
  );
  return logs;
}

test.before(async () => {
  s3 = await startS3();
  const bucket = await s3.bucket();
  Object.assign(process.env, s3.env);
  pg = await startClusterRegistry();
  const over = {
    proxy: { idleTimeout: 600_000, wakeTimeout: '30s' },
    checkpoints: { store: `s3://${bucket}/cluster`, s3: { endpoint: s3.endpoint, connectTimeout: '1s', timeout: '20s', maxAttempts: 1 } },
  };
  // one move at a time: a restart during the drain finds one under way and others left
  a = await hostOf('host-a', over, {}, { drainConcurrency: 1 });
  b = await hostOf('host-b', over);
  c = await hostOf('host-c', over, { capacity: { memory: 2 ** 40 } });
  for (let i = 0; i < 4; i++) {
    const slug = `dr${i}${randomBytes(3).toString('hex')}`;
    const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
    assert.is(r.status, 200, r.text);
    const page = `page of ${slug} ${randomBytes(8).toString('hex')}\n`;
    const running = i === 0;
    const app = running ? `printf '#!/bin/bash\\nexec python3 -m http.server 80 --directory /root/www\\n' > /root/run.sh && chmod +x /root/run.sh && ` : '';
    const w = await sh(
      a.daemon.runtime,
      r.json.id,
      `mkdir -p /root/www && cat > /root/www/index.html && ${app}head -c 3000000 /dev/urandom > /root/data && sync`,
      Buffer.from(page),
    );
    assert.is(w.code, 0, w.err);
    const sum = await sh(a.daemon.runtime, r.json.id, 'sha256sum /root/data | cut -d" " -f1');
    servers.push({ id: r.json.id, slug, page, sha: sum.out.trim(), running });
    assert.is(await placed(r.json.id), 'host-a');
  }
  doomed = servers.pop()!;
  for (const s of [...servers.filter((x) => !x.running), doomed]) {
    const stop = await adminCli(['servers', 'stop', s.id], env(a));
    assert.is(stop.code, 0, stop.stderr);
    await until('asleep on A', () => a.daemon.runtime.get(s.id)?.state === 'sleeping', 30_000, 50);
  }
  const app = servers[0];
  await until('the app answers on A', async () => ((await get(a, `${app.slug}.localhost`, '/')).body.toString() === app.page ? true : undefined), 30_000, 100);
});

test.after(async () => {
  await c?.stop();
  await b?.stop();
  if (again) {
    for (const s of again.runtime.list()) {
      await again.hosting.core.exposures.releaseServer(s.id).catch(() => {});
      await again.runtime.delete(s.id).catch(() => {});
    }
    await again.stop();
    if (again.runtime instanceof ContainerRuntime) await again.runtime.net.teardown().catch(() => {});
    rmSync(a.dataDir, { recursive: true, force: true });
  } else await a?.stop();
  await pg?.stop();
  await s3?.stop();
  for (const [k, v] of [
    ['AWS_ACCESS_KEY_ID', saved.id],
    ['AWS_SECRET_ACCESS_KEY', saved.secret],
  ] as const)
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

test('a drain while the store is down: every move fails and status says why; the draining host takes no create and no move', async () => {
  // host-c, with the most room, drains too (it has nothing to move): no server goes to it
  const rooms = JSON.parse((await adminCli(['cluster', 'status', '--json'], env(b))).stdout).hosts as { name: string; capacity: { memoryRoomBytes: number } }[];
  const room = (n: string) => rooms.find((h) => h.name === n)!.capacity.memoryRoomBytes;
  assert.ok(room('host-c') > room('host-b'), 'host-c has the most room');
  assert.is((await adminCli(['cluster', 'drain', 'host-c'], env(b))).code, 0);
  await s3.killRgw();
  const r = await adminCli(['cluster', 'drain', 'host-a'], env(b));
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /host-a is draining since .*its 4 servers move to the other hosts/);
  const unknown = await adminCli(['cluster', 'drain', 'host-nowhere'], env(b));
  assert.is(unknown.code, 1);
  assert.match(unknown.stderr, /no host host-nowhere/);
  await until('every server of host-a failed once', async () => Object.keys((await status()).drain?.failed ?? {}).length === 4, 90_000, 200);
  const del = await adminCli(['servers', 'delete', doomed.id, '--yes'], env(a));
  assert.is(del.code, 0, del.stderr);
  const h = await until(
    'the deleted server no longer counted',
    async () => {
      const s = await status();
      return Object.keys(s.drain?.failed ?? {}).length === 3 && s.servers === 3 ? s : undefined;
    },
    30_000,
    200,
  );
  assert.not.ok(doomed.id in h.drain!.failed);
  for (const s of servers) assert.match(h.drain!.failed[s.id].why, /store/, JSON.stringify(h.drain));
  assert.is(h.drain!.moved, 0);
  assert.is(h.servers, 3, 'left: 3');
  const text = await adminCli(['cluster', 'status'], env(b));
  assert.match(text.stdout, /host-a +up, draining/);
  assert.match(text.stdout, /drain of host-c since .*: 0 moved, 0 left, 0 failed \(done: nothing left on it\)/);
  assert.match(text.stdout, /drain of host-a since .*: 0 moved, 3 left, 3 failed/);
  assert.match(text.stdout, new RegExp(`${servers[1].id}: .*store`));
  // a create through host-a's API is made on host-b
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  assert.is(await placed(made.json.id), 'host-b', 'the draining host made no server');
  assert.ok(b.daemon.store.servers.get(made.json.id));
  // nor does a server move to it
  const m = await adminCli(['servers', 'move', made.json.id, '--to', 'host-a'], env(b));
  assert.is(m.code, 1, m.stdout);
  assert.match(m.stderr, /host-a is being drained/);
  // nothing moved: every server still on host-a, the running one running
  for (const s of servers) assert.is(await placed(s.id), 'host-a');
  assert.is(a.daemon.runtime.get(servers[0].id)?.state, 'running');
  // the drain in host-a's `rootbox status` (its registry line and --json) and in the metrics (the
  // scrape-time sources are the last daemon started in this process: host-c, draining with nothing on it)
  const st = await adminCli(['status', '--json'], env(a));
  assert.is(st.code, 0, st.stderr);
  const drain = JSON.parse(st.stdout).registry?.drain;
  assert.equal({ ...drain, since: typeof drain?.since }, { since: 'string', moved: 0, left: 3, failed: 3 }, st.stdout);
  assert.match((await adminCli(['status'], env(a))).stdout, /host host-a .*; draining since .*: 0 moved, 3 left, 3 failed/);
  const prom = parseExposition(await (await fetch(`http://127.0.0.1:${c.daemon.metrics.port}/metrics`)).text());
  for (const state of ['moved', 'left', 'failed', 'moving']) assert.is(sampleValue(prom, 'rootbox_drain_servers', { state }), 0, state);
});

test('the draining daemon restarts twice, once mid-drain, and resumes: once the store is back every server moves to host-b and serves', async () => {
  await stopA();
  const logs = await startA();
  await s3.startRgw();
  // a restart while the drain moves: the move under way finishes, the others wait for the next start
  await until('a first server moved', () => logs.some((l) => l.msg === 'drain: server moved'), 120_000, 20);
  await stopA();
  const mid = await status();
  assert.ok(mid.drain!.moved >= 1 && mid.servers >= 1 && mid.drain!.moved + mid.servers === 3, `mid-drain: ${JSON.stringify(mid)}`);
  console.log(`  restarted mid-drain: ${mid.drain!.moved} moved, ${mid.servers} left`);
  for (const s of servers)
    assert.is(await placed(s.id), existsSync(join(a.dataDir, 'servers', s.id)) ? 'host-a' : 'host-b', `${s.id}: placed where its disk is`);
  await startA();
  const h = await until(
    'nothing left on host-a',
    async () => {
      const s = await status();
      // the count is written once each move returned (a moment after its placement changed)
      return s.servers === 0 && s.drain?.moved === 3 && !again!.store.servers.all({ withPending: true }).length ? s : undefined;
    },
    180_000,
    250,
  );
  assert.is(h.drain!.moved, 3, JSON.stringify(h.drain));
  assert.equal(h.drain!.failed, {}, 'every failure forgotten once it moved');
  const text = await adminCli(['cluster', 'status'], env(b));
  assert.match(text.stdout, /drain of host-a since .*: 3 moved, 0 left, 0 failed \(done/);
  for (const s of servers) {
    assert.is(await placed(s.id), 'host-b', 'never to host-c, which drains');
    assert.ok(b.daemon.store.servers.get(s.id), `${s.id} on host-b`);
    assert.is(again!.runtime.get(s.id), undefined, `${s.id} gone from host-a`);
    for (const [d, tls] of [
      [b, true],
      [a, false],
      [b, false],
    ] as const) {
      const g = await get(d, `${s.slug}.localhost`, '/', { tls });
      assert.is(g.status, 200, `${s.slug} through ${d.cfg.cluster.host}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
      assert.is(g.body.toString(), s.page);
    }
    if (!s.running) {
      assert.is(b.daemon.runtime.get(s.id)?.state, 'sleeping', 'a sleeping server stays asleep on host-b (its page served without a wake)');
      const start = await adminCli(['servers', 'start', s.id], env(b));
      assert.is(start.code, 0, start.stderr);
    }
    const sum = await sh(b.daemon.runtime, s.id, 'sha256sum /root/data | cut -d" " -f1');
    assert.is(sum.out.trim(), s.sha, `${s.id}: the same file`);
  }
  assert.is(b.daemon.runtime.get(servers[0].id)?.state, 'running', 'the running server runs on host-b');
});

test('undrain reopens host-a: a create through it is made there', async () => {
  const r = await adminCli(['cluster', 'undrain', 'host-a'], env(b));
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /host-a takes creates again/);
  assert.is((await adminCli(['cluster', 'undrain', 'host-c'], env(b))).code, 0);
  await until('host-a takes creates again', () => a.logs.some((l) => l.msg === 'drain ended: this host takes creates again'), 30_000, 50);
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  assert.is(await placed(made.json.id), 'host-a');
  assert.is((await status()).drain, null);
  const text = await adminCli(['cluster', 'status'], env(b));
  assert.not.match(text.stdout, /draining|drain of/);
});

test.run();
