// One owner per record, against a real daemon with real containers: a server's limits live in
// its server record alone (hosting writes them); the runtime's record holds address, uid range
// and desired state, and the runtime keeps the limits it applied in the server's bundle. A data
// dir written with the old runtime records (slug, memory and disk in them too) is migrated when
// the daemon starts and its server goes on serving with its limits.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger } from '../../src/log/index.js';
import { startDaemon, type Daemon } from '../../src/main.js';
import { ContainerRuntime, type Runtime } from '../../src/runtime/index.js';
import { removeCgroup } from '../../src/runtime/cgroup.js';
import { openEnv } from '../../src/store/db.js';
import { migrations } from '../../src/store/migrations.js';
import { call, cgroupMemoryLimit, diskSizes } from '../billing/api.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
let d: TestDaemon;
/** The daemon started again over d's data dir (cleaned up here). */
let again: Daemon<Runtime> | undefined;
const created = (s: string) => `${s}.${d.cfg.domain}`;

test.before(async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1', hosting: { rateLimit: { createsPerIpPerHour: 1000 } }, proxy: { idleTimeout: '1h' } });
});
test.after(async () => {
  if (!again) return d?.stop();
  for (const s of again.runtime.list()) await again.runtime.delete(s.id).catch((e) => console.error('cleanup: delete failed', s.id, e));
  await again.stop();
  if (again.runtime instanceof ContainerRuntime) await again.runtime.net.teardown().catch((e) => console.error('cleanup: network teardown failed', e));
  removeCgroup(`/${d.cfg.runtime.nftTable}`); // its servers' cgroup parent, when empty
  rmSync(d.dataDir, { recursive: true, force: true });
});

const bundleMemory = (id: string) =>
  JSON.parse(readFileSync(join(d.dataDir, 'servers', id, 'bundle', 'config.json'), 'utf8')).linux.resources.memory.limit as number;

async function hostname(daemon: Daemon<Runtime>, id: string): Promise<string> {
  const p = daemon.runtime.exec(id, { argv: ['hostname'] });
  let out = '';
  p.stdout.on('data', (c: Buffer) => (out += c));
  p.stdin.end();
  await p.exited;
  return out.trim();
}

let id = '';
let slug = '';
let apiKey = '';

test('a tier change writes the limits to the server record only; the runtime record keeps address, uid range and desired state, the bundle and cgroup the new limit', async () => {
  const created = await call(d.http, 'POST', '/create');
  assert.is(created.status, 200, JSON.stringify(created.body));
  id = created.body.id;
  slug = created.body.subdomain.split('.')[0];
  apiKey = created.body.api_key;
  const { store, runtime, billing } = d.daemon;
  const rt = store.runtime.get(id)!;
  assert.equal(Object.keys(rt).sort(), ['createdAt', 'desired', 'id', 'image', 'ip', 'uidBase']);
  assert.is(bundleMemory(id), 256 * MiB);

  assert.ok(await billing.credit(store.servers.get(id)!.accountId, 5, 'test:records'));
  assert.equal(store.runtime.get(id), rt, 'the runtime record is not written by a tier change');
  const rec = store.servers.get(id)!;
  assert.equal([rec.memoryBytes, rec.diskBytes], [4 * GiB, 5 * GiB]);
  assert.is(bundleMemory(id), 4 * GiB);
  assert.is(cgroupMemoryLimit(d.cfg.runtime, id), 4 * GiB);
  assert.equal([runtime.get(id)?.memoryBytes, runtime.get(id)?.diskBytes], [4 * GiB, 5 * GiB], 'the runtime reports the limits it applied');
  assert.is(diskSizes(d.dataDir, id).image, 5 * GiB);
});

test('a data dir whose runtime records hold slug, memory and disk (schema 1) is migrated at start and its server goes on serving with its limits', async () => {
  await d.daemon.stop(); // containers keep running, as in production
  const env = openEnv(d.dataDir, migrations);
  env.txSync(() => {
    const rt = env.db<Record<string, unknown>>('rt_servers');
    rt.putSync(id, { ...rt.get(id), slug, memoryBytes: 4 * GiB, diskBytes: 5 * GiB });
    env.db('meta').putSync('schemaVersion', 1);
  });
  await env.close();

  again = await startDaemon(d.cfg, createLogger({ level: 'error', sink: () => {} }));
  assert.is(again.store.schemaVersion, Math.max(...migrations.map((m) => m.version)));
  assert.equal(
    Object.keys(again.store.runtime.get(id)!).sort(),
    ['createdAt', 'desired', 'id', 'image', 'ip', 'uidBase'],
    'slug and limits left the runtime record',
  );
  const view = again.runtime.get(id);
  assert.equal(
    [view?.state, view?.slug, view?.memoryBytes, view?.diskBytes],
    ['running', slug, 4 * GiB, 5 * GiB],
    'adopted, with the limits its bundle and disk hold',
  );
  assert.is(await hostname(again, id), slug);
  const shown = await call(again.edge.ports.http, 'GET', `/servers/${id}`, { key: apiKey });
  assert.equal([shown.status, shown.body.state, shown.body.subdomain], [200, 'running', created(slug)], JSON.stringify(shown.body));

  // asleep and woken again, it boots from its bundle with the paid limit
  await again.runtime.stop(id);
  await again.runtime.start(id);
  assert.is(cgroupMemoryLimit(d.cfg.runtime, id), 4 * GiB);
  assert.is(await hostname(again, id), slug);
});

test.run();
