// Checkpoints of a real runc server (runtime captureDisk/replaceDisk + the engine over the
// directory store): a 50 MB random file survives checkpoint → change → restore byte-exact while
// the server's app comes back; the disk is frozen (its own mount, not the host's) only for the
// copy and writes go on after; a 10 MiB change stores about 10 MiB; a sleeping server is
// checkpointed without a wake; two copies taken at once are each their own; a corrupt chunk refuses the restore and the server keeps its disk.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AppError } from '../../src/errors.js';
import { run } from '../../src/runtime/proc.js';
import { CheckpointEngine, Checkpoints, DirBlobStore, blobKeys, type Manifest } from '../../src/checkpoints/index.js';
import { until } from '../helpers/wait.js';
import { httpGet, MiB, newId, RUN_SH, sh, startRuntime, waitFor, type RuntimeEnv } from '../runtime/helpers/env.js';

let env: RuntimeEnv;
let cps: Checkpoints;
const id = newId('ckp');
let ip = '';
const settings = { tier: 'free', image: 'test', slug: 'ckp-one', runSh: true };

test.before(async () => {
  env = await startRuntime('ckp', 137);
  const engine = new CheckpointEngine({ store: new DirBlobStore(join(env.dataDir, 'checkpoints')), secret: { key: async () => Buffer.alloc(32, 3) } });
  cps = new Checkpoints(engine, env.rt);
});
test.after(async () => {
  await env?.cleanup();
});

const sha = async (path: string) => {
  const r = await sh(env.rt, id, `sha256sum ${path} | cut -d' ' -f1`);
  assert.is(r.code, 0, r.err);
  return r.out.trim();
};

/** The disk copies (captures) in the server's directory. */
const captures = () => readdirSync(env.rt.serverDir(id)).filter((n) => n.startsWith('disk.ckp'));

let first: Manifest;
let bigSha = '';

test('a running server is checkpointed with its disk frozen only for the copy, its app serving throughout', async () => {
  const s = await env.rt.create({ id, slug: 'ckp-one', memoryBytes: 256 * MiB, diskBytes: 512 * MiB });
  ip = s.ip;
  const w = await sh(env.rt, id, 'mkdir -p /root/www && echo served > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh', RUN_SH);
  assert.is(w.code, 0, w.err);
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'served\n');
  const big = await sh(env.rt, id, 'head -c 50000000 /dev/urandom > /root/big && sync && sha256sum /root/big | cut -d" " -f1');
  assert.is(big.code, 0, big.err);
  bigSha = big.out.trim();

  // a client every 10 ms and a writer inside the server while the checkpoint is taken
  const writer = env.rt.exec(id, { argv: ['/bin/bash', '-c', 'while :; do date +%s%N >> /root/ticks; sleep 0.005; done'] });
  let failures = 0;
  let requests = 0;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      requests++;
      if ((await httpGet(ip, 80, 2000)) !== 'served\n') failures++;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  await until('the client polls before the checkpoint', () => requests >= 10);
  const taken = await cps.take(id, settings, 'manual', 'first');
  const after = requests + 10;
  await until('the client polls after the checkpoint', () => requests >= after);
  polling = false;
  await poller;
  await writer.signalAll('KILL');
  first = taken.manifest;
  console.log(
    `  checkpoint of a running server: ${taken.method}, writes paused ${taken.pausedMs.toFixed(1)} ms; ${(first.newBytes / MiB).toFixed(1)} MiB stored`,
  );
  assert.is(failures, 0, `${failures} of ${requests} requests failed during the checkpoint`);
  assert.ok(first.newBytes >= 47 * MiB, 'the 50 MB file is stored');
  assert.ok(first.newBytes < 80 * MiB, `holes are not stored (${first.newBytes})`);
  // the freeze is the server's own mount's and it is over: the server writes
  assert.is((await sh(env.rt, id, 'echo after > /root/after && cat /root/after')).out, 'after\n');
  assert.not.ok(existsSync(join(env.rt.serverDir(id), 'disk.frozen')));
  assert.equal(captures(), [], 'the copy is removed');
  const ticks = (await sh(env.rt, id, 'cat /root/ticks')).out.trim().split('\n').map(Number);
  let gap = 0;
  for (let i = 1; i < ticks.length; i++) gap = Math.max(gap, (ticks[i] - ticks[i - 1]) / 1e6);
  console.log(`  longest gap between a writer's appends during the checkpoint: ${gap.toFixed(1)} ms`);
});

test('two copies of one disk taken at once are each their own: the first is still read after the second was taken and removed', async () => {
  let release!: () => void;
  const secondDone = new Promise<void>((r) => (release = r));
  const first = env.rt.captureDisk!(id, async (copy) => {
    await secondDone; // a move's checkpoint still reading its copy while the interval's takes one and is done
    return statSync(copy.path).size;
  });
  const second = env.rt.captureDisk!(id, async (copy) => statSync(copy.path).size).finally(release);
  const [a, b] = await Promise.all([first, second]);
  assert.ok(a > 0 && a === b, `both copies read whole (${a}, ${b})`);
  assert.equal(captures(), [], 'both removed after');
});

test('a 10 MiB change is stored as about 10 MiB', async () => {
  const r = await sh(env.rt, id, 'head -c 10485760 /dev/urandom > /root/ten && sync');
  assert.is(r.code, 0, r.err);
  const m = (await cps.take(id, settings, 'auto')).manifest;
  console.log(`  10 MiB changed: ${(m.newBytes / MiB).toFixed(2)} MiB stored (${(m.newBytes / (10 * MiB)).toFixed(2)}×)`);
  assert.ok(m.newBytes <= 1.3 * 10 * MiB, `${m.newBytes} bytes for a 10 MiB change`);
  const list = await cps.list(id);
  assert.equal(
    list.map((c) => c.id),
    [m.id, first.id],
  );
});

test('restore brings the disk back byte-exact and the app back up', async () => {
  const r = await sh(env.rt, id, 'head -c 1000000 /dev/urandom > /root/big && rm /root/ten && echo changed > /root/www/index.html && sync');
  assert.is(r.code, 0, r.err);
  assert.is.not(await sha('/root/big'), bigSha);
  await cps.restore(id, first.id);
  assert.is(env.rt.get(id)?.state, 'running');
  assert.is(await sha('/root/big'), bigSha);
  assert.is((await sh(env.rt, id, 'test -e /root/ten; echo $?')).out, '1\n');
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'served\n');
});

test('a wake asked while a restore swaps the disk waits for it and boots the restored disk', async () => {
  const r = await sh(env.rt, id, 'head -c 1000000 /dev/urandom > /root/big && sync');
  assert.is(r.code, 0, r.err);
  let woke: Promise<void> | undefined;
  // the wake comes the moment the staged image is complete: while the server stops for the flush
  await env.rt.replaceDisk(id, async (path) => {
    await cps.engine.materialize(first, path, { sync: false });
    setImmediate(() => (woke = env.rt.start(id)));
  });
  await woke;
  assert.is(env.rt.get(id)?.state, 'running');
  assert.is(await sha('/root/big'), bigSha, 'the server runs on the restored disk');
  assert.not.ok(
    readdirSync(env.rt.serverDir(id)).some((n) => n.startsWith('disk.img.')),
    'no staged image left',
  );
});

test('a restore that finds the disk busy removes its staged image and starts the server again', async () => {
  const r = await sh(env.rt, id, 'head -c 1000000 /dev/urandom > /root/big && sync');
  assert.is(r.code, 0, r.err);
  const changed = await sha('/root/big');
  // a host process inside the server's root keeps it mounted
  const holder = spawn('sleep', ['60'], { cwd: join(env.rt.serverDir(id), 'rootfs'), stdio: 'ignore' });
  try {
    const err = await cps.restore(id, first.id).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof Error, 'the restore fails');
  } finally {
    holder.kill('SIGKILL');
  }
  assert.not.ok(
    readdirSync(env.rt.serverDir(id)).some((n) => n.startsWith('disk.img.')),
    'no staged image left',
  );
  assert.is(env.rt.get(id)?.state, 'running', 'the server that was running runs again');
  assert.is(await sha('/root/big'), changed, 'on its old disk');
  await cps.restore(id, first.id);
  assert.is(await sha('/root/big'), bigSha);
});

test('a corrupt chunk refuses the restore: 502 checkpoint_corrupt, the server keeps its disk and keeps running', async () => {
  const list = await cps.list(id);
  const second = list.find((c) => c.kind === 'auto')!;
  const store = cps.engine.store as DirBlobStore;
  const inFirst = new Set(first.chunks.map((c) => c[1]));
  const own = second.chunks.find((c) => !inFirst.has(c[1]))!; // a chunk of the 10 MiB file: the first checkpoint's stay whole
  const victim = join(store.where, ...blobKeys.chunk(own[1]).split('/'));
  const bytes = readFileSync(victim);
  bytes[40] ^= 0xff;
  writeFileSync(victim, bytes);
  const err = await cps.restore(id, second.id).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof AppError, String(err));
  assert.is(err.code, 'checkpoint_corrupt');
  assert.is(env.rt.get(id)?.state, 'running');
  assert.is(await sha('/root/big'), bigSha);
  assert.not.ok(
    readdirSync(env.rt.serverDir(id)).some((n) => n.startsWith('disk.img.')),
    'no staged image left',
  );
  const missing = await cps.restore(id, 'ckp_0000000000000000000000').then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(missing instanceof AppError && missing.code === 'checkpoint_not_found');
});

test('a disk left frozen by a daemon killed during a checkpoint is thawed by the next start', async () => {
  const dir = env.rt.serverDir(id);
  writeFileSync(join(dir, 'disk.frozen'), ''); // what captureImage leaves between freeze and thaw
  await run('fsfreeze', ['-f', join(dir, 'disk')]);
  writeFileSync(join(dir, 'disk.ckp.0123456789ab'), 'half a copy');
  await env.restart(); // a new runtime over the same data dir: its reconcile
  assert.not.ok(existsSync(join(dir, 'disk.frozen')));
  assert.equal(captures(), []);
  const w = await sh(env.rt, id, 'echo thawed > /root/thawed && sync && cat /root/thawed');
  assert.is(w.out, 'thawed\n', w.err);
  cps = new Checkpoints(cps.engine, env.rt);
});

test('a sleeping server is checkpointed and restored without a wake', async () => {
  await env.rt.stop(id);
  assert.is(env.rt.get(id)?.state, 'sleeping');
  const taken = await cps.take(id, settings, 'auto');
  assert.is(env.rt.get(id)?.state, 'sleeping');
  console.log(`  checkpoint of a sleeping server: writes paused ${taken.pausedMs.toFixed(1)} ms; ${(taken.manifest.newBytes / MiB).toFixed(2)} MiB new`);
  await cps.restore(id, first.id);
  assert.is(env.rt.get(id)?.state, 'sleeping', 'restored asleep');
  await env.rt.start(id);
  assert.is(await sha('/root/big'), bigSha);
});

test.run();
