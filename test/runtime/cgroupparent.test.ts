// A server's cgroup is under its daemon's own parent, named after its nft table (runtime/spec.ts
// cgroupPath). A container left running in another parent — made by a release before the parent
// was per daemon (`/rootbox/<id>` on a daemon whose table is not `rootbox`); here: the same data
// dir started again under another table — is restarted at reconcile into the new daemon's own, so
// that its freeze, its stop's cgroup kill and the watchdog (runtime/fencewatch.ts) reach it.
// On cgroup v1 the parent also holds the freezer pin (an empty cgroup kept frozen: freezer.ts)
// from the runtime's first freeze; a runtime's close removes it.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync } from 'node:fs';
import { silentLogger } from '../../src/log/index.js';
import { removeCgroup } from '../../src/runtime/cgroup.js';
import { createRuntime } from '../../src/runtime/index.js';
import { run } from '../../src/runtime/proc.js';
import { MiB, newId, runtimeOnly, startRuntime, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const id = newId('cgp');
const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');

/** The cgroup path of process `pid` (v2, else its freezer's). */
const cgroupOf = (pid: number) =>
  readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => (v2 ? l.startsWith('0::') : l.split(':')[1] === 'freezer'))
    ?.split(':')[2];

/** The first runtime's nft table (the second's is `<table>b`). */
let table = '';

test.before(async () => {
  env = await startRuntime('cgp', 19);
  table = env.cfg.runtime.nftTable;
});
test.after(async () => {
  await env?.cleanup(); // the second runtime's network and the first's cgroup parent
  for (const family of ['inet', 'bridge']) await run('nft', ['delete', 'table', family, table]).catch(() => {});
  removeCgroup(`/${table}b`);
});

test("a server running in another cgroup parent than its daemon's is restarted into the daemon's own at reconcile", async () => {
  await env.rt.create({ id, slug: 'cgroup-parent', memoryBytes: 128 * MiB, diskBytes: 160 * MiB });
  assert.is(cgroupOf((await env.rt.runc.state(id))!.pid), `/${table}/${id}`);
  const pinState = `/sys/fs/cgroup/freezer/${table}/freezer-pin/freezer.state`;
  assert.ok(!existsSync(pinState), 'no freezer pin before a freeze');
  const thawed: string[] = [];
  env.rt.onThawed((s) => thawed.push(s));
  await env.rt.freeze(id);
  if (!v2) assert.is(readFileSync(pinState, 'utf8').trim(), 'FROZEN', 'the freezer pin, from the first freeze');
  await env.rt.thaw(id);
  assert.equal(thawed, [id], 'its thaw told by id');
  await env.rt.close(); // as a daemon that stopped: its container runs on
  assert.ok(!existsSync(pinState), 'the pin goes with the runtime');
  const cfg = { ...env.cfg, runtime: { ...env.cfg.runtime, nftTable: `${table}b` } };
  const { runtime, reconciled } = await createRuntime(runtimeOnly(cfg), env.store.runtime, silentLogger);
  env.rt = runtime;
  env.cfg = cfg;
  assert.equal(reconciled?.started, [id], 'restarted, not adopted');
  const init = (await runtime.runc.state(id))!.pid;
  assert.is(cgroupOf(init), `/${table}b/${id}`, "in the daemon's own cgroup parent now");
  assert.is(runtime.get(id)?.state, 'running');
  const frozen = await runtime.freeze(id);
  assert.ok(frozen.memoryBytes > 0, 'its freeze reaches it');
  assert.ok(runtime.frozen(id), 'frozen');
  await runtime.thaw(id);
});

test.run();
