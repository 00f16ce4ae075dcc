// A server's directory laid down for a box rebuilt from its state backup (`rootbox restore
// --from-backup`, issue 37), before any daemon runs on the new data dir: its disk image (written
// by the caller, e.g. a checkpoint's, or a fresh ext4 one) and a bundle naming only what the
// runtime reads back of it (its slug and memory limit: serverfiles.ts readApplied). The daemon's
// reconcile at start does the rest as after a host reboot: mounts the disk and the overlay,
// rewrites the whole bundle, adds the network and starts the servers that should run.

import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writeDurably } from './bundle.js';
import { diskPaths, makeDisk } from './disk.js';

export interface Seed {
  slug: string;
  memoryBytes: number;
  diskBytes: number;
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
    } else await makeDisk(p, seed.diskBytes);
    mkdirSync(join(dir, 'bundle'), { mode: 0o700 });
    writeDurably(join(dir, 'bundle', 'config.json'), JSON.stringify({ hostname: seed.slug, linux: { resources: { memory: { limit: seed.memoryBytes } } } }));
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}
