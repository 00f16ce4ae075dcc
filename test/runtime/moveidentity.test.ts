// A server made from another's disk keeps its identity unless it is a fork (issue 38 review M2),
// with real runc servers: a server's SSH host keys and machine id are its own — a move or a
// recovery (runtime.create with `fromDisk`, no `fork`) makes the same server on another host and
// keeps them, so a client that trusts it trusts it there; a fork (`fork: true`, issue 37) is a new
// server whose host keys are removed and whose machine id is new.

import { copyFile } from 'node:fs/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MiB, newId, sh, startRuntime, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const src = newId('is');
const moved = newId('im');
const forked = newId('if');
const MACHINE_ID = 'c0ffee00c0ffee00c0ffee00c0ffee00';
const size = { memoryBytes: 128 * MiB, diskBytes: 160 * MiB };

test.before(async () => {
  env = await startRuntime('ident', 149);
  await env.rt.create({ id: src, slug: 'ident-src', ...size });
  const w = await sh(
    env.rt,
    src,
    `mkdir -p /etc/ssh && echo secret-ed25519 > /etc/ssh/ssh_host_ed25519_key && echo pub > /etc/ssh/ssh_host_ed25519_key.pub && echo ${MACHINE_ID} > /etc/machine-id && sync`,
  );
  assert.is(w.code, 0, w.err);
});

test.after(async () => {
  await env?.cleanup();
});

/** A server made from a consistent copy of the source's disk (what a checkpoint's restore fills). */
async function fromSource(id: string, slug: string, fork: boolean): Promise<void> {
  await env.rt.captureDisk(src, (copy) =>
    env.rt.create({ id, slug, ...size, fromDisk: { fill: (path) => copyFile(copy.path, path), uidBase: copy.uidBase, ...(fork ? { fork } : {}) } }),
  );
}

test('a server made on another host from its own disk (a move, a recovery) keeps its SSH host keys and machine id', async () => {
  await fromSource(moved, 'ident-moved', false);
  const r = await sh(env.rt, moved, 'cat /etc/ssh/ssh_host_ed25519_key /etc/machine-id');
  assert.is(r.code, 0, r.err);
  assert.is(r.out, `secret-ed25519\n${MACHINE_ID}\n`);
});

test('a fork gets its own: no host keys of the source, a new machine id', async () => {
  await fromSource(forked, 'ident-fork', true);
  const r = await sh(env.rt, forked, 'ls /etc/ssh; cat /etc/machine-id');
  assert.is(r.code, 0, r.err);
  assert.not.match(r.out, /ssh_host_/);
  const id = r.out.trim().split('\n').at(-1);
  assert.match(id ?? '', /^[0-9a-f]{32}$/);
  assert.is.not(id, MACHINE_ID);
});

test.run();
