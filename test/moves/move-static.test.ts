// A sleeping server without an app keeps serving its pages while it moves (issue 38: "requests
// during the move get at most a short wait"): two daemons on a real PostgreSQL registry with their
// checkpoints in a real S3 store (Ceph RGW, test/helpers/s3.ts), one real runc server on host-a
// asleep with a static page. The store is paused (SIGSTOP) so the move stops at its checkpoint:
// meanwhile its page is answered at once through both edges, from host-a's disk, without a wake.
// Once the store answers again the move ends, from the checkpoint taken once it slept (nothing
// wrote its disk since: the move takes none), and the page is served from host-b.

import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import type { TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { get, type Got } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';

let cl: S3Cluster;
let s3: TestS3;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let srv: { id: string; slug: string; page: string; key: string };
/** The checkpoint taken once it slept: its disk as it is, which the move restores (none taken). */
let slept: string;
let paused = false;

const env = (d: Pick<TestDaemon, 'dataDir'>) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const placed = async (id: string) => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${id}'`)).trim();
/** The page through an edge, or a failure once `ms` passed without an answer. */
const page = (d: TestDaemon, ms: number): Promise<Got> =>
  Promise.race([
    get(d, `${srv.slug}.localhost`, '/'),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer through ${d.cfg.cluster.host} within ${ms} ms`)), ms).unref()),
  ]);

test.before(async () => {
  const settings = { checkpoints: { s3: { timeout: '120s', maxAttempts: 1 } }, proxy: { idleTimeout: 600_000, wakeTimeout: '30s' } };
  cl = await startS3Cluster(['host-a', 'host-b'], settings);
  ({ s3, pg } = cl);
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  // host-a takes host-b for up (its lease seen, or its channel answering): a move before that is refused
  await until('host-a sees host-b up', () => a.daemon.registry!.placements.host('host-b')?.up === true, 30_000, 50);
  const slug = `ms${randomBytes(3).toString('hex')}`;
  const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  srv = { id: r.json.id, slug, key: r.json.api_key, page: `page of ${slug} ${randomBytes(8).toString('hex')}\n` };
  const w = await api(a, 'POST', `/servers/${srv.id}/exec`, {
    key: r.json.api_key,
    body: { command: `mkdir -p /root/www && echo -n '${srv.page}' > /root/www/index.html && sync`, timeout: 60 },
  });
  assert.is(w.json.exit_code, 0, w.text);
  const stop = await adminCli(['servers', 'stop', srv.id], env(a));
  assert.is(stop.code, 0, stop.stderr);
  await until('asleep on host-a', () => a.daemon.runtime.get(srv.id)?.state === 'sleeping', 30_000, 50);
  const cp = await api(a, 'POST', `/servers/${srv.id}/checkpoints`, { key: srv.key, body: { comment: 'asleep' } });
  assert.ok(cp.status === 200 || cp.status === 201, cp.text);
  slept = cp.json.id;
  assert.ok(slept, cp.text);
});

test.after(async () => {
  if (paused) s3?.contRgw();
  await cl?.stop();
});

test('its page is answered at once through both edges while the move waits for the store, then from host-b', async () => {
  s3.pauseRgw();
  paused = true;
  const moving = adminCli(['servers', 'move', srv.id, '--to', 'host-b', '--json'], env(a));
  await until('the move under way', () => a.logs.some((l) => String(l.msg).startsWith('moving a server')), 30_000, 20);
  for (let i = 0; i < 3; i++)
    for (const d of [a, b]) {
      const g = await page(d, 5000);
      assert.is(g.status, 200, `through ${d.cfg.cluster.host}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
      assert.is(g.body.toString(), srv.page);
    }
  assert.is(await placed(srv.id), 'host-a', 'still placed on host-a: the move waits for the store');
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'sleeping', 'served without a wake');
  s3.contRgw();
  paused = false;
  const r = await moving;
  assert.is(r.code, 0, r.stderr);
  const report = JSON.parse(r.stdout).move as { was: string; checkpoint: string };
  assert.is(report.was, 'sleeping');
  assert.is(report.checkpoint, slept, 'moved from the checkpoint taken once it slept: nothing wrote its disk since');
  assert.equal(
    (await b.daemon.hosting.core.checkpoints!.engine.list(srv.id)).map((m) => m.id),
    [slept],
    'no checkpoint taken by the move',
  );
  assert.is(await placed(srv.id), 'host-b');
  assert.is(a.daemon.runtime.get(srv.id), undefined, 'gone from host-a');
  assert.is(b.daemon.runtime.get(srv.id)?.state, 'sleeping');
  for (const d of [a, b]) {
    const g = await page(d, 30_000);
    assert.is(g.status, 200);
    assert.is(g.body.toString(), srv.page);
  }
});

test.run();
