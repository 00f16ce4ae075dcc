// A server's directory laid down for a box rebuilt from its state backup (`rootbox restore
// --from-backup`, issue 37), before any daemon runs on the new data dir: its disk image (written
// by the caller, e.g. a checkpoint's, or a fresh ext4 one) and a bundle naming only what the
// runtime reads back of it (its slug and memory limit: serverfiles.ts readApplied). The daemon's
// reconcile at start does the rest as after a host reboot: mounts the disk and the overlay,
// rewrites the whole bundle, adds the network and starts the servers that should run. A fresh
// disk is made the way create makes one, with the files a new server starts with (its hostname,
// hosts, resolver: bundle.ts personalise) written in by mkfs.ext4 -d, without mounting anything.

import { chmodSync, chownSync, closeSync, existsSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { personalise, writeDurably } from './bundle.js';
import { diskPaths, type DiskPaths } from './disk.js';
import { run } from './proc.js';

export interface Seed {
  slug: string;
  memoryBytes: number;
  diskBytes: number;
  /** First host uid of the server's range (its root). */
  uidBase: number;
}

/** An empty ext4 image holding upper/ (owned by the server's root) with its personal files, and work/. */
async function freshDisk(p: DiskPaths, seed: Seed): Promise<void> {
  mkdirSync(p.dir, { recursive: true, mode: 0o700 });
  const tree = mkdtempSync(join(p.dir, '.tree-'));
  try {
    chmodSync(tree, 0o755); // the filesystem's root, as mkfs makes it without -d
    const upper = join(tree, 'upper');
    mkdirSync(join(upper, 'etc'), { recursive: true, mode: 0o755 });
    for (const d of [upper, join(upper, 'etc')]) chownSync(d, seed.uidBase, seed.uidBase);
    personalise(upper, seed.uidBase, seed.slug);
    mkdirSync(join(tree, 'work'), { mode: 0o700 });
    const fd = openSync(p.img, 'wx', 0o600);
    try {
      ftruncateSync(fd, seed.diskBytes);
    } finally {
      closeSync(fd);
    }
    await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1', '-d', tree, p.img], { timeoutMs: 120_000 });
  } finally {
    rmSync(tree, { recursive: true, force: true });
  }
}

/** Lays down `<dataDir>/servers/<id>`: the disk image `fill` writes (a fresh empty disk without
 *  one) and its bundle. On failure nothing of the server is left. */
export async function seedServer(dataDir: string, id: string, seed: Seed, fill?: (img: string) => Promise<void>): Promise<void> {
  const dir = join(dataDir, 'servers', id);
  if (existsSync(dir)) throw new Error(`${dir} exists already`);
  const p = diskPaths(dir);
  try {
    if (fill) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      await fill(p.img);
    } else await freshDisk(p, seed);
    mkdirSync(join(dir, 'bundle'), { mode: 0o700 });
    writeDurably(join(dir, 'bundle', 'config.json'), JSON.stringify({ hostname: seed.slug, linux: { resources: { memory: { limit: seed.memoryBytes } } } }));
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}
