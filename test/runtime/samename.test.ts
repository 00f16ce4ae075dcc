// One server on two runtimes of one machine (issue 38: a move's source and target in a test's
// cluster), with real runc: the cgroup is named after the server alone (spec.ts cgroupPath), so
// the target's parked copy (made asleep) and the source's running container share it. The
// target's removal of its copy (a move given up) kills its parked init alone, never the source's
// container (runtime/halt.ts: no `runc kill --all` for a created container). And an exec into a
// container that stopped behind the runtime's back is a clear 503 server_not_ready — never runc's
// own "cannot exec in a stopped container" with exit 255 — and the next start serves again.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError, type AppError } from '../../src/errors.js';
import { alive } from '../../src/runtime/proc.js';
import { MiB, newId, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let src: RuntimeEnv;
let dst: RuntimeEnv;
const id = newId('sn');

test.before(async () => {
  src = await startRuntime('sn-src', 71);
  dst = await startRuntime('sn-dst', 72);
  await src.rt.create({ id, slug: 'sn-src', memoryBytes: 128 * MiB, diskBytes: 160 * MiB });
});
test.after(async () => {
  await dst?.cleanup();
  await src?.cleanup();
});

test("the target's parked copy of a server removed: the source's running container of it goes on", async () => {
  const running = (await src.rt.runc.state(id))!;
  assert.is(running.status, 'running');
  await dst.rt.create({ id, slug: 'sn-dst', memoryBytes: 128 * MiB, diskBytes: 160 * MiB, start: false });
  const parked = (await dst.rt.runc.state(id))!;
  assert.is(parked.status, 'created', 'the copy is parked (its init waits in the cgroup both share)');
  await dst.rt.delete(id);
  assert.not.ok(alive(parked.pid), "the parked copy's init is gone");
  assert.is((await src.rt.runc.state(id))?.status, 'running', "the source's container still runs");
  assert.ok(alive(running.pid), "the source's init is alive");
  const r = await sh(src.rt, id, 'echo here');
  assert.is(r.code, 0, r.err);
  assert.is(r.out, 'here\n');
});

test('an exec into a container stopped behind the runtime: server_not_ready, no runc text; a start serves again', async () => {
  const init = (await src.rt.runc.state(id))!.pid;
  await src.rt.runc.kill(id, 'KILL', true);
  assert.ok(await waitFor(() => !alive(init), 5000), 'the init is gone');
  assert.is(src.rt.get(id)?.state, 'running', 'the runtime was not told');
  let err: unknown;
  try {
    await sh(src.rt, id, 'echo here');
  } catch (e) {
    err = e;
  }
  assert.ok(isAppError(err), `an AppError, not an exec: ${String(err)}`);
  const e = err as AppError;
  assert.is(e.code, 'server_not_ready');
  assert.is(e.kind, 'unavailable', 'a 503');
  assert.not.match(e.message, /runc|exec failed|stopped container/);
  assert.is(src.rt.get(id)?.state, 'failed', 'marked failed: the next wake starts it');
  await src.rt.start(id);
  const r = await sh(src.rt, id, 'echo back');
  assert.is(r.code, 0, r.err);
  assert.is(r.out, 'back\n');
});

test.run();
