// A server the store no longer knows (a restore of an older backup, a crashed create) is an
// orphan at the next start: its container and its directory both go, and the reconcile report
// lists it once. The cgroup of an exec a runtime before this one left running in a server it
// adopts is released: the command goes on in the server's own cgroup, the exec's is gone.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readdirSync } from 'node:fs';
import { silentLogger } from '../../src/log/index.js';
import { createRuntime } from '../../src/runtime/index.js';
import { MiB, newId, runtimeOnly, sh, startRuntime, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;

test.before(async () => {
  env = await startRuntime('orph', 61);
});
test.after(async () => {
  await env?.cleanup();
});

test('an orphan with a running container and a server directory is removed and listed once', async () => {
  const id = newId('o');
  await env.rt.create({ id, slug: 'orphan-one', memoryBytes: 96 * MiB, diskBytes: 160 * MiB });
  assert.ok(
    (await env.rt.runc.list()).some((c) => c.id === id),
    'its container runs',
  );
  env.store.runtime.remove(id); // as after a restore of a backup made before this server
  await env.rt.close();
  const { runtime, reconciled } = await createRuntime(runtimeOnly(env.cfg), env.store.runtime, silentLogger);
  env.rt = runtime;
  assert.equal(reconciled?.orphans, [id]);
  assert.not.ok(
    (await runtime.runc.list()).some((c) => c.id === id),
    'its container is gone',
  );
  assert.not.ok(existsSync(runtime.serverDir(id)), 'its directory is gone');
});

test('the cgroup of an exec the runtime before left running is released at the next start; the command goes on', async () => {
  const id = newId('x');
  await env.rt.create({ id, slug: 'exec-left', memoryBytes: 96 * MiB, diskBytes: 160 * MiB });
  const execs = () => readdirSync(`/sys/fs/cgroup/freezer${env.rt.cgroup(id)}`).filter((n) => n.startsWith('exec-'));
  const p = env.rt.exec(id, { argv: ['sleep', '7003'] });
  p.stdin.end();
  try {
    assert.is(execs().length, 1, 'the exec runs in a cgroup of its own');
    await env.rt.close(); // as a daemon that ended while the command ran (its runc exec is this process's child: not ended as a leftover)
    const { runtime, reconciled } = await createRuntime(runtimeOnly(env.cfg), env.store.runtime, silentLogger);
    env.rt = runtime;
    assert.ok(reconciled?.adopted.includes(id));
    assert.equal(execs(), [], "the exec's cgroup is gone");
    assert.match((await sh(runtime, id, 'ps -eo args=')).out, /sleep 7003/);
  } finally {
    p.kill('SIGKILL');
  }
});

test.run();
