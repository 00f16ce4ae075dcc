// A restore onto a full disk (issue 37 item 6): a real daemon whose data dir is its own ext4 on a
// loop device (a sparse 4 GiB file: the daemon's capacity check keeps 2 GiB free for itself, and
// fallocate fills it without writing the file), a real runc server with 32 MB of random data
// checkpointed into the directory store, then the filesystem filled until 4 MiB are left (root's
// own reserve included: the daemon is root). The
// restore answers 507 restore_no_room, and the server keeps its old disk: every file under /root
// and /etc byte-identical (a sorted tar of them, sha256), the server running, no staged image
// left and the free space as it was. With the room back the same restore succeeds byte-exact.
// The loop device and the mount are removed after.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { send } from '../http/contract.js';
import { sh } from '../runtime/helpers/env.js';

const MiB = 1 << 20;
const work = mkdtempSync(join(tmpdir(), 'rbx-ckp-full-'));
const backing = join(work, 'fs.img');
const mnt = join(work, 'mnt');
const fill = join(mnt, 'fill');
let d: TestDaemon | undefined;
let mounted = false;
let id = '';
let key = '';

async function must(cmd: string, args: string[]): Promise<string> {
  const r = await run(cmd, args, { timeoutMs: 120_000 });
  assert.is(r.code, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

test.before(async () => {
  await must('truncate', ['-s', '4G', backing]);
  // no inode table or journal zeroed now or later: the backing file stays sparse
  await must('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1', backing]);
  mkdirSync(mnt);
  await must('mount', ['-o', 'loop,noinit_itable', backing, mnt]);
  mounted = true;
  mkdirSync(fill);
  for (const dir of [work, mnt]) chmodSync(dir, 0o711); // the servers' mapped uids pass through to the data dir
  d = await startTestDaemon({ dataDir: join(mnt, 'data'), hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 } } });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
});
test.after(async () => {
  await d?.stop();
  if (d) rmSync(d.cfg.dataDir, { recursive: true, force: true });
  // the loop device goes with the mount (mounted -o loop: autoclear)
  if (mounted && (await run('umount', [mnt])).code !== 0) await run('umount', ['-l', mnt]);
  const left = await run('losetup', ['-j', backing]);
  if (left.stdout.trim()) console.error(`loop device left: ${left.stdout}`);
  rmSync(work, { recursive: true, force: true });
});

const api = (method: string, path: string, body?: unknown) =>
  send(d!.http, 'api.localhost', method, path, { headers: { authorization: `Bearer ${key}` }, ...(body === undefined ? {} : { body }) });
const inServer = async (script: string) => {
  const r = await sh(d!.daemon.runtime, id, script);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out.trim();
};
/** Every file under /root and /etc (contents, names, modes, owners, times), as one sha256. */
const files = () => inServer('tar --sort=name --numeric-owner -cf - -C / root etc | sha256sum | cut -d" " -f1');
const free = () => {
  const s = statfsSync(mnt);
  return s.bfree * s.bsize; // the daemon is root: what root may still use
};

test('a restore onto a full disk answers 507 restore_no_room and the server keeps its disk byte-identical; with room it restores', async () => {
  const big = await inServer('head -c 33554432 /dev/urandom > /root/big && sync && sha256sum /root/big | cut -d" " -f1');
  const c = await api('POST', `/servers/${id}/checkpoints`);
  assert.is(c.status, 201, c.text);
  await inServer('head -c 16777216 /dev/urandom > /root/big && echo after > /root/after && sync');
  const before = await files();

  // fill the filesystem (one big file, then 1 MiB ones until none fits), then free 4 MiB
  await must('fallocate', ['-l', String(free() - 64 * MiB), join(fill, 'big')]);
  for (let i = 0; ; i++) if ((await run('fallocate', ['-l', String(MiB), join(fill, `${i}`)])).code !== 0) break;
  for (let i = 0; i < 4; i++) rmSync(join(fill, `${i}`));
  const room = free();
  // statfs counts ext4's own reserve for metadata (16 MiB here) as free; no file may take it
  assert.ok(room <= 24 * MiB, `free after filling: ${room}`);

  const r = await api('POST', `/servers/${id}/restore`, { checkpoint: c.json.id });
  assert.is(r.status, 507, r.text);
  assert.is(r.json.error, 'restore_no_room');
  assert.not.match(r.text, new RegExp(mnt), 'no host path in the answer');
  assert.is(d!.daemon.runtime.get(id)?.state, 'running');
  assert.is(await files(), before, 'every file of the server as it was');
  assert.not.ok(
    readdirSync(join(d!.cfg.dataDir, 'servers', id)).some((n) => n.startsWith('disk.img.')),
    'no staged image left',
  );
  assert.ok(free() >= room - MiB, `the space the attempt took is back (${free()} of ${room})`);

  rmSync(fill, { recursive: true });
  const again = await api('POST', `/servers/${id}/restore`, { checkpoint: c.json.id });
  assert.is(again.status, 200, again.text);
  assert.is(await inServer('sha256sum /root/big | cut -d" " -f1'), big);
  assert.is(await inServer('test -e /root/after; echo $?'), '1');
  assert.ok(existsSync(d!.cfg.dataDir));
});

test.run();
