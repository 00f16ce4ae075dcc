// `bin/rootbox admin credit` against a real daemon with real containers: the real CLI (a separate
// process) credits an account, and the host's own view of the server — its cgroup's memory limit,
// its disk image and filesystem, its bounds on connections in nftables — shows the paid tier's ceilings at once. A credit written while
// the daemon is stopped is applied when it starts again.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger } from '../../src/log/index.js';
import { startDaemon, type Daemon } from '../../src/main.js';
import { appliedBounds } from '../../src/runtime/netbounds.js';
import { removeCgroup } from '../../src/runtime/cgroup.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { call, canGrowOnline, cgroupMemoryLimit, diskSizes, ensureBuilt, rootboxBin } from './api.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
let d: TestDaemon;
/** The daemon started again over d's data dir by the restart test (then cleaned up here). */
let again: Daemon | undefined;
let stopped = false;

test.before(async () => {
  ensureBuilt();
  d = await startTestDaemon({ publicIp: '127.0.0.1', hosting: { rateLimit: { createsPerIpPerHour: 1000 } } });
});
test.after(async () => {
  if (!stopped) return d?.stop();
  again ??= await startDaemon(d.cfg, createLogger({ level: 'error', sink: () => {} }));
  for (const s of again.runtime.list()) {
    await again.hosting.core.exposures.releaseServer(s.id).catch(() => {});
    await again.runtime.delete(s.id).catch((e) => console.error('cleanup: delete failed', s.id, e));
  }
  await again.stop();
  await again.runtime.net.teardown().catch((e) => console.error('cleanup: network teardown failed', e));
  removeCgroup(`/${d.cfg.runtime.nftTable}`); // its servers' cgroup parent, when empty
  rmSync(d.dataDir, { recursive: true, force: true });
});

const cli = (...args: string[]) => run(rootboxBin, ['admin', 'credit', ...args], { env: { ...process.env, ROOTBOX_DATA_DIR: d.dataDir }, timeoutMs: 120_000 });

test("admin credit on a running daemon raises the running server's cgroup memory limit and disk to the paid tier at once", async () => {
  const created = await call(d.http, 'POST', '/create');
  assert.is(created.status, 200, JSON.stringify(created.body));
  const { id, api_key: key } = created.body;
  assert.is(cgroupMemoryLimit(d.cfg.runtime, id), 256 * MiB, 'anonymous ceiling before');
  assert.is(diskSizes(d.dataDir, id).image, 256 * MiB);
  const bounds = () => appliedBounds(d.cfg.runtime.nftTable, d.daemon.runtime.get(id)!.ip);
  assert.equal(await bounds(), { flows: 1000, newFlowsPerSecond: 100 }, "the anonymous tier's connection bounds before");

  const r = await cli(id, '5');
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /balance now \$5; tier paid/);
  assert.match(r.stdout, new RegExp(`${id}: 4096 MiB RAM, 5120 MiB disk`));

  assert.is(cgroupMemoryLimit(d.cfg.runtime, id), 4 * GiB, 'the cgroup limit is raised live, without a restart');
  assert.is(d.daemon.runtime.get(id)?.state, 'running');
  assert.equal(await bounds(), { flows: 16000, newFlowsPerSecond: 1000 }, "the paid tier's connection bounds, live");
  const disk = diskSizes(d.dataDir, id);
  assert.is(disk.image, 5 * GiB, 'disk image grown');
  if (canGrowOnline) assert.ok(disk.fs > 4.5 * GiB, `filesystem grown online: ${disk.fs}`);
  const credits = await call(d.http, 'GET', '/credits', { key });
  assert.is(credits.body.tier, 'paid');
  assert.is(credits.body.balance_usd, 5);
  assert.is(statSync(join(d.dataDir, 'admin.sock')).mode & 0o777, 0o600, 'the admin socket is root only');
});

test('admin credit refuses an unknown target and a bad amount with exit 1 and the reason', async () => {
  const unknown = await cli('srv_0123456789ab', '5');
  assert.is(unknown.code, 1);
  assert.match(unknown.stderr, /no account or server srv_0123456789ab/);
  const created = await call(d.http, 'POST', '/create');
  for (const usd of ['five', '0', '2000000']) {
    const bad = await cli(created.body.id, usd);
    assert.is(bad.code, 1, usd);
    assert.match(bad.stderr, /usd must be a positive number/);
  }
  assert.is(d.daemon.store.accounts.get(d.daemon.store.servers.get(created.body.id)!.accountId)!.balanceUsd, 0);
});

test('a credit written while the daemon is stopped is applied to the running container when the daemon starts', async () => {
  const created = await call(d.http, 'POST', '/create');
  assert.is(created.status, 200, JSON.stringify(created.body));
  const { id } = created.body;
  stopped = true;
  await d.daemon.stop(); // containers keep running, as in production
  const r = await cli(id, '1');
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /daemon is not running/);
  assert.is(cgroupMemoryLimit(d.cfg.runtime, id), 256 * MiB, 'nobody applied it yet');

  again = await startDaemon(d.cfg, createLogger({ level: 'error', sink: () => {} }));
  assert.is(again.runtime.get(id)?.state, 'running');
  assert.is(cgroupMemoryLimit(d.cfg.runtime, id), 4 * GiB, 'the stored paid tier is applied at start');
  assert.is(diskSizes(d.dataDir, id).image, 5 * GiB);
  assert.is(again.store.servers.get(id)?.memoryBytes, 4 * GiB);
});

test.run();
