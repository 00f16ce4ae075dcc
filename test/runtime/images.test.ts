// Image versioning with real runc servers: a server keeps the image it was created from when the
// host's current image changes (a new recipe, here a new image name: both give a new tag), and
// `rootbox image list` / `image prune` see which images are in use. The images are hard-linked
// copies of the shared base image (cheap), each with a marker file telling them apart.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/index.js';
import { silentLogger } from '../../src/log/index.js';
import { buildImage, createRuntime, findImage, imageOptions, imageTag, listImages, pruneImages, type ContainerRuntime } from '../../src/runtime/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { IMAGE_DIR, MiB, newId, runtimeOnly, sh } from './helpers/env.js';
import { run } from '../helpers/run.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
const top = mkdtempSync(join(tmpdir(), 'rbx-images-'));
chmodSync(top, 0o711); // the server's root user traverses it to its rootfs
const imageDir = join(top, 'images');
const dataDir = join(top, 'data');
const N = 42;
const net = { bridge: `rbt${N}`, subnet: `10.199.${N}.0/24`, nftTable: `rbt${N}`, uidStart: 3_000_000_000 + N * 65536 * 64, uidRanges: 64, stopGrace: '1s' };
const cfgFor = (image: string) => loadConfig({ env: {}, overrides: { dataDir, runtime: { imageDir, image, ...net } } });

let store: Store | undefined;
let rt: ContainerRuntime | undefined;
const a = newId('imga');
const b = newId('imgb');

/** A built image `<name>-<current hash>` that is the shared base image plus /etc/rbx-image. */
function fakeImage(name: string): string {
  const tag = imageTag({ name });
  const dir = join(imageDir, tag);
  mkdirSync(dir, { recursive: true });
  const r = spawnSync('cp', ['-al', join(shared, 'rootfs'), join(dir, 'rootfs')]);
  assert.is(r.status, 0, String(r.stderr));
  writeFileSync(join(dir, 'rootfs/etc/rbx-image'), `${name}\n`);
  writeFileSync(join(dir, 'recipe.json'), JSON.stringify({ hash: tag.split('-').pop(), builtAt: new Date().toISOString(), packages: [] }));
  return tag;
}
let shared = '';

async function open(image: string): Promise<ContainerRuntime> {
  store = openStore(dataDir);
  rt = (await createRuntime(runtimeOnly(cfgFor(image)), store.runtime, silentLogger)).runtime;
  return rt;
}
async function close(): Promise<void> {
  await rt?.close(); // lets its host-name locks go (the next open takes them)
  await store?.close();
  store = undefined;
}
const marker = async (id: string) => (await sh(rt!, id, 'cat /etc/rbx-image')).out.trim();
const cli = (...args: string[]) =>
  spawnSync(bin, ['image', ...args], {
    encoding: 'utf8',
    env: { ...process.env, ROOTBOX_DATA_DIR: dataDir, ROOTBOX_IMAGE_DIR: imageDir, ROOTBOX_IMAGE: 'imgb' },
  });

test.before(async () => {
  const sharedCfg = loadConfig({ env: {}, overrides: { dataDir, runtime: { imageDir: IMAGE_DIR } } });
  await buildImage(imageOptions(sharedCfg), () => {});
  shared = join(findImage(imageOptions(sharedCfg))!, '..');
  fakeImage('imga');
});

test.after(async () => {
  if (rt) {
    for (const id of [a, b]) await rt.delete(id).catch(() => {});
    await rt.net.teardown().catch(() => {});
  }
  await close();
  rmSync(top, { recursive: true, force: true });
});

test('a server records the image it was created from', async () => {
  await open('imga');
  await rt!.create({ id: a, slug: 'imga', memoryBytes: 128 * MiB, diskBytes: 128 * MiB });
  assert.is(store!.runtime.get(a)!.image, imageTag({ name: 'imga' }));
  assert.is(await marker(a), 'imga');
  assert.is((await sh(rt!, a, 'echo mine > /root/file && cat /root/file')).out, 'mine\n');
});

test("after the host's current image changes, the old server keeps its own image through restart, sleep and wake; a new server gets the new one", async () => {
  await close();
  fakeImage('imgb');
  await open('imgb'); // a daemon whose current image is B adopts the running server of A
  assert.is(await marker(a), 'imga');
  await rt!.stop(a);
  await rt!.start(a); // a wake mounts the overlay again: still over A
  assert.is(await marker(a), 'imga');
  assert.is((await sh(rt!, a, 'cat /root/file')).out, 'mine\n');
  await rt!.create({ id: b, slug: 'imgb', memoryBytes: 128 * MiB, diskBytes: 128 * MiB });
  assert.is(await marker(b), 'imgb');
  // after a host reboot (containers and mounts gone; so no parked container either), reconcile
  // mounts each over its own image
  await rt!.stop(a, { park: false });
  for (const m of ['rootfs', 'disk']) await run('umount', [join(dataDir, 'servers', a, m)]);
  await close();
  await open('imgb');
  await rt!.start(a);
  assert.is(await marker(a), 'imga');
});

test('a server whose image is gone fails to start with image_missing instead of booting over another image', async () => {
  const tagA = imageTag({ name: 'imga' });
  await rt!.stop(a, { park: false }); // as a reboot leaves it: no parked container holding the old rootfs
  for (const m of ['rootfs', 'disk']) await run('umount', [join(dataDir, 'servers', a, m)]);
  const aside = join(imageDir, `${tagA}.aside`);
  spawnSync('mv', [join(imageDir, tagA), aside]);
  try {
    const err = await rt!.start(a).then(
      () => null,
      (e) => e,
    );
    assert.is(err?.code, 'image_missing');
  } finally {
    spawnSync('mv', [aside, join(imageDir, tagA)]);
  }
  await rt!.start(a);
  assert.is(await marker(a), 'imga');
});

test('image list shows each image with its servers; image prune removes only unused ones and dead build dirs', async () => {
  const unused = fakeImage('imgc');
  const deadBuild = join(imageDir, `${imageTag({ name: 'imgd' })}.build-999999999`);
  mkdirSync(join(deadBuild, 'rootfs'), { recursive: true });
  const listed = listImages({ imageDir, name: 'imgb' }, store!.runtime.all());
  assert.equal(listed.map((i) => [i.tag.split('-')[0], i.current, i.servers]).sort(), [
    ['imga', false, [a]],
    ['imgb', true, [b]],
    ['imgc', false, []],
  ]);
  const list = cli('list');
  assert.is(list.status, 0, list.stderr);
  assert.match(list.stdout, new RegExp(`imga-\\w+ .*1 server: ${a}`));
  assert.match(list.stdout, new RegExp(`imgb-\\w+  \\(current\\) .*1 server: ${b}`));
  assert.match(list.stdout, /imgc-\w+ .*0 servers/);
  const prune = cli('prune');
  assert.is(prune.status, 0, prune.stderr);
  assert.match(prune.stdout, new RegExp(`removed ${unused}`));
  assert.ok(!existsSync(join(imageDir, unused)) && !existsSync(deadBuild));
  assert.ok(existsSync(join(imageDir, imageTag({ name: 'imga' }), 'recipe.json')), 'A is still used');
  assert.is(await marker(a), 'imga');
  // once its last server is gone, A goes too; B, the current one, stays even without servers
  await rt!.delete(a);
  await rt!.delete(b);
  assert.equal(pruneImages({ imageDir, name: 'imgb' }, store!.runtime.all()), [imageTag({ name: 'imga' })]);
  assert.equal(readFileSync(join(imageDir, imageTag({ name: 'imgb' }), 'rootfs/etc/rbx-image'), 'utf8'), 'imgb\n');
  // the shared image the copies were linked from is untouched
  assert.ok(!existsSync(join(shared, 'rootfs/etc/rbx-image')));
});

test('image build --force refuses to rebuild an image a server uses', async () => {
  await rt!.create({ id: b, slug: 'imgb', memoryBytes: 128 * MiB, diskBytes: 128 * MiB });
  await close(); // the CLI opens the store itself
  const r = cli('build', '--force');
  assert.is(r.status, 1);
  assert.match(r.stderr, /used by|lower layer of 1 server/);
  await open('imgb');
});

test.run();
