// A start of a server asked while the server moves off its host (what an SSH login, a connection
// to an exposed port or an API exec does: presence's wake → Runtime.start) — two daemons on a real
// PostgreSQL registry, checkpoints in a real S3 store (Ceph RGW), a real runc server. The move
// holds the server's starts until it ends; its stop and its final checkpoint take the server's
// queue in the runtime. A start that waited for the move inside that queue blocked the move's
// checkpoint, and the move's end it waited for never came: the server ran nowhere and the move
// never answered. The start waits outside the queue: the move ends, and the start is then refused
// (the registry places the server on the target), the server served from the target alone.

import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import { until } from '../helpers/wait.js';
import { get } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';
import { holdFinalCheckpoint } from './helpers/holdtake.js';

let cl: S3Cluster;
let a: TestDaemon;
let b: TestDaemon;
let srv: { id: string; host: string };

test.before(async () => {
  cl = await startS3Cluster(['host-a', 'host-b'], { proxy: { idleTimeout: 600_000 } });
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  const slug = `sw${randomBytes(3).toString('hex')}`;
  const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  srv = { id: r.json.id, host: `${slug}.localhost` };
});

test.after(async () => {
  await cl?.stop();
});

test('a start asked while the server moves waits for the move outside its queue: the move ends, the start is refused, the target serves it', async () => {
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
  const hold = holdFinalCheckpoint(a);
  let starting: Promise<unknown> | undefined;
  try {
    const moving = adminCli(['servers', 'move', srv.id, '--to', 'host-b', '--json'], {
      ...process.env,
      ROOTBOX_DATA_DIR: a.dataDir,
      ROOTBOX_REGISTRY: cl.pg.url,
    });
    // the server stopped and held on A, its final checkpoint not yet taken
    await hold.reached;
    assert.is(a.daemon.runtime.get(srv.id)?.state, 'sleeping');
    starting = a.daemon.runtime.start(srv.id).then(
      () => 'started',
      (e: { code?: string }) => e.code ?? String(e),
    );
    // the start's turn in the queue comes before the checkpoint's: it must not keep it
    await new Promise((r) => setImmediate(r));
    hold.release();
    let timer: NodeJS.Timeout | undefined;
    const r = await Promise.race([
      moving,
      new Promise<never>(
        (_, no) => (timer = setTimeout(() => no(new Error('the move did not end within 120 s (a start waiting for it holds its queue)')), 120_000)),
      ),
    ]).finally(() => clearTimeout(timer));
    assert.is(r.code, 0, r.stderr + r.stdout);
    assert.is(JSON.parse(r.stdout).move.to, 'host-b');
  } finally {
    hold.release();
    hold.restore();
  }
  assert.is(await starting, 'server_moved', 'the start waited for the move, then the registry placed the server on host-b');
  assert.is(b.daemon.runtime.get(srv.id)?.state, 'running');
  await until('A holds nothing of it', () => a.daemon.runtime.get(srv.id) === undefined && !existsSync(join(a.dataDir, 'servers', srv.id)), 30_000, 50);
  for (const via of [a, b]) assert.is((await get(via, srv.host, '/')).status, 200, `its page through ${via === a ? 'host-a' : 'host-b'}`);
});

test.run();
