// A server the store no longer knows (a restore of an older backup, a crashed create) is an
// orphan at the next start: its container and its directory both go, and the reconcile report
// lists it once.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync } from 'node:fs';
import { silentLogger } from '../../src/log/index.js';
import { createRuntime } from '../../src/runtime/index.js';
import { MiB, newId, runtimeOnly, startRuntime, type RuntimeEnv } from './helpers/env.js';

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

test.run();
