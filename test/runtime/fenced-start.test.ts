// The runtime's start guard on real runc containers, given the registry's wake fence over a real
// PostgreSQL registry as main.ts gives it in cluster mode (this runtime is host-a). A server that
// should run and whose container is gone (as after a reboot of the host) is not started by the
// boot-time reconcile when the registry moved it to host-b while this host was down: it is left
// asleep, listed as fenced, and a later start of it is refused with server_moved; placed on this
// host again (by this host, from the epoch it read), it starts and its epoch is bumped. A server whose placement the registry deleted is refused with
// server_not_found.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/index.js';
import { RegistryNames, RegistryPool, WakeFence } from '../../src/registry/index.js';
import { createRuntime } from '../../src/runtime/index.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { MiB, newId, runtimeOnly, startRuntime, type RuntimeEnv } from './helpers/env.js';
import { initRegistry } from '../helpers/cluster.js';

let env: RuntimeEnv | undefined;
let pg: TestPostgres | undefined;
let pool: RegistryPool | undefined;
let fence: WakeFence;
let names: RegistryNames;
const id = newId('f');

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  names = new RegistryNames(pool, 'host-a');
  fence = new WakeFence('host-a', names, silentLogger);
  env = await startRuntime('fence', 67);
});
test.after(async () => {
  await env?.cleanup();
  await pool?.end();
  await pg?.stop();
});

const placement = () => pg!.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`);
const running = async () => (await env!.rt.runc.state(id))?.status === 'running';
async function refused(code: string): Promise<void> {
  const err = await env!.rt.start(id).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isAppError(err) && err.code === code, `refused with ${code}: ${String(err)}`);
  assert.is(env!.rt.get(id)?.state, 'sleeping', 'left asleep');
  assert.not.ok(await running(), 'no container runs');
}

test('the boot-time reconcile leaves a server the registry moved to another host asleep; its start is refused until it is placed here again', async () => {
  const rt = env!.rt;
  await rt.create({ id, slug: 'fenced-one', memoryBytes: 96 * MiB, diskBytes: 160 * MiB });
  assert.ok(await names.claim('fenced-one', id));
  await names.place({ serverId: id, accountId: 'acc_fence', slug: 'fenced-one', publicIp: '127.0.0.1' });
  assert.ok(await running());
  // the host goes down hard: its container is gone, the server should still run
  await rt.runc.kill(id, 'KILL', true);
  await rt.runc.delete(id, true);
  await rt.close();
  assert.is(env!.store.runtime.get(id)?.desired, 'running');
  // meanwhile the registry places it on host-b
  await pg!.sql(`UPDATE placements SET host = 'host-b', epoch = epoch + 1 WHERE server_id = '${id}'`);

  const { runtime, reconciled } = await createRuntime(runtimeOnly(env!.cfg), env!.store.runtime, silentLogger, (x) => fence.check(x));
  env!.rt = runtime;
  assert.not.ok(await running(), 'not started by the reconcile');
  assert.is(runtime.get(id)?.state, 'sleeping');
  assert.equal(reconciled?.started, []);
  assert.equal(reconciled?.fenced, [id]);
  assert.is(fence.refused, 1);

  await refused('server_moved');
  assert.is(await placement(), 'host-b 2', 'the placement is left as the registry has it');

  // placed here again by this host, from the epoch it read; the start compares and bumps it
  await names.place({ serverId: id, accountId: 'acc_fence', slug: 'fenced-one', publicIp: '127.0.0.1' }, 2);
  await runtime.start(id);
  assert.is(runtime.get(id)?.state, 'running');
  assert.ok(await running());
  assert.is(await placement(), 'host-a 4');
});

test('a start of a server whose placement the registry deleted (its tombstone) is refused: server_not_found', async () => {
  await env!.rt.stop(id);
  await pg!.sql(`DELETE FROM placements WHERE server_id = '${id}'`);
  await refused('server_not_found');
});

test.run();
