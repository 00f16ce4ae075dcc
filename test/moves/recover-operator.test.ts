// `rootbox cluster recover HOST` with cluster.recoverAfter 0 (issue 38 item 3): no host is ever
// recovered automatically, the operator says when. Two hosts on a real PostgreSQL registry with
// their checkpoints in a real S3 store (Ceph RGW): host-c's server, checkpointed at sleep, is not
// recovered while host-c is away, however long; `cluster recover host-c` is refused without
// --force (no host fences itself with recoverAfter 0); with it, on host-a, it makes it there
// from that checkpoint (its page and file byte for byte) and it answers through host-a's edge.

import { randomBytes } from 'node:crypto';
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

let cl: S3Cluster;
let pg: TestPostgres;
let a: TestDaemon;
let c: TestDaemon;
const srv = { id: '', slug: '', key: '', page: randomBytes(2000), sha: '' };
const env = (d: TestDaemon) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const placement = async () => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${srv.id}'`)).trim();

test.before(async () => {
  cl = await startS3Cluster(
    [
      { name: 'host-a', settings: { proxy: { idleTimeout: 600_000 } } },
      { name: 'host-c', settings: { proxy: { idleTimeout: '1s', idleCheckInterval: '200ms' } } },
    ],
    { cluster: { recoverAfter: 0 } },
  );
  ({ pg } = cl);
  a = cl.daemon('host-a');
  c = cl.daemon('host-c');
  srv.slug = `ro${randomBytes(3).toString('hex')}`;
  const r = await api(c, 'POST', '/create', { body: { subdomains: [srv.slug] } });
  assert.is(r.status, 200, r.text);
  srv.id = r.json.id;
  srv.key = r.json.api_key;
  const page = srv.page.toString('base64');
  const w = await sh(
    c.daemon.runtime,
    srv.id,
    `mkdir -p /root/www && echo ${page} | base64 -d > /root/www/index.html && head -c 4000000 /dev/urandom > /root/data && sync`,
  );
  assert.is(w.code, 0, w.err);
  srv.sha = (await sh(c.daemon.runtime, srv.id, 'sha256sum /root/data | cut -d" " -f1')).out.trim();
  await until('checkpointed at sleep', async () => ((await a.daemon.hosting.core.checkpoints!.engine.list(srv.id)).length ? true : undefined), 60_000, 200);
});

test.after(async () => {
  await cl?.stop();
});

test('recoverAfter 0: host-c away is never recovered automatically; cluster recover host-c brings its server back on host-a, byte for byte', async () => {
  await c.stop();
  await until('host-c down for host-a', () => a.daemon.registry!.placements.host('host-c')?.up === false, 30_000, 100);
  // several of host-a's recovery rounds, run now: nothing moves
  for (let i = 0; i < 3; i++) await a.daemon.moves.recoveryRound();
  assert.is(await placement(), 'host-c', 'not recovered without the operator');
  assert.is(a.daemon.store.servers.getAny(srv.id), undefined);
  // not while host-c was reached over the channel within its lease (it may run its servers still)
  await until('host-c silent for a lease', () => (a.daemon.registry!.contact.reachedAgo('host-c') ?? Infinity) >= 3000, 30_000, 100);
  // no self-fence with recoverAfter 0: the operator must say host-c is down (--force)
  const refused = await adminCli(['cluster', 'recover', 'host-c'], env(a));
  assert.is(refused.code, 1, refused.stdout);
  assert.match(refused.stderr, /--force/);
  assert.is(await placement(), 'host-c');
  const r = await adminCli(['cluster', 'recover', 'host-c', '--force', '--json'], env(a));
  assert.is(r.code, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout).recovery;
  assert.equal(
    report.recovered.map((x: { server: string; to: string }) => [x.server, x.to]),
    [[srv.id, 'host-a']],
  );
  assert.is(await placement(), 'host-a');
  const g = await get(a, `${srv.slug}.localhost`, '/index.html');
  assert.is(g.status, 200, `${g.status} ${g.body.subarray(0, 200).toString()}`);
  assert.ok(g.body.equals(srv.page), 'its page byte for byte');
  // woken on host-a by the command
  const x = await api(a, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command: 'sha256sum /root/data | cut -d" " -f1' } });
  assert.is(x.status, 200, x.text);
  assert.is(String(x.json.stdout).trim(), srv.sha, 'its file byte for byte');
  // asked again: nothing is left on host-c
  const again = await adminCli(['cluster', 'recover', 'host-c', '--force'], env(a));
  assert.is(again.code, 0, again.stderr);
  assert.match(again.stdout, /host host-c: 0 servers recovered, 0 cannot be, 0 failed/);
});

test.run();
