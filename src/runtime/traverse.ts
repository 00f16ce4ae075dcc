// Whether the servers' mapped uids can reach the data dir and the image dir: every existing
// ancestor needs the others-execute bit (they are no owner or group of it), else runc fails with
// "mount …/rootfs: permission denied". `serve` (factory.ts) refuses to start and `doctor` reports
// it, each naming the exact chmod. The data dir itself, and its `servers`, the daemon opens at
// start (openDataDir).

import { chmodSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { AppError } from '../errors.js';
import { findImage, imageBuildCommand, imageOptions, recipeHash, type ImageSettings } from './image.js';

/** Existing directories among `path` (unless `self` is false) and its ancestors that others
 *  cannot traverse (o+x unset). The daemon adds o+x to the data dir itself, not to its parents. */
export function untraversable(path: string, self = true): string[] {
  const bad: string[] = [];
  let p = self ? resolve(path) : dirname(resolve(path));
  for (;;) {
    try {
      if ((statSync(p).mode & 0o001) === 0) bad.push(p);
    } catch {
      // not created yet: the daemon makes it (with o+x)
    }
    const up = dirname(p);
    if (up === p) break;
    p = up;
  }
  return bad.reverse();
}

/** The sentence for `dirs` (non-empty): what breaks and the command that fixes it. */
export function traverseAdvice(what: string, dir: string, dirs: string[]): string {
  return `the ${what} ${resolve(dir)} is not reachable by the servers' mapped uids (others-execute bit missing on ${dirs.join(', ')}); run: chmod o+x ${dirs.join(' ')}`;
}

/** Throws `data_dir_untraversable` when the servers' uids cannot reach `dataDir` or `imageDir`. */
export function assertTraversable(dataDir: string, imageDir: string): void {
  for (const [what, dir, self] of [
    ['data dir', dataDir, false],
    ['image dir', imageDir, true],
  ] as const) {
    const bad = untraversable(dir, self);
    if (bad.length) throw AppError.of('data_dir_untraversable', traverseAdvice(what, dir, bad));
  }
}

/** `serve`'s first checks, before any part touches the data dir: the base image is built (else the
 *  exact command that builds it) and the servers' uids reach the data dir and image dir. */
export function assertServable(cfg: ImageSettings): void {
  const img = imageOptions(cfg);
  if (!findImage(img))
    throw AppError.of('image_missing', `base image ${img.name} (recipe ${recipeHash()}) is not built in ${img.imageDir}; run: ${imageBuildCommand(cfg)}`);
  assertTraversable(cfg.dataDir, img.imageDir);
}

/** Lets the container's root user traverse to its rootfs (runc needs o+x on every parent);
 *  `servers` is 0711: traversable, not listable (each server's own dir is closed: disk.ts). */
export function openDataDir(dataDir: string): void {
  for (const d of [dataDir, join(dataDir, 'servers')]) {
    mkdirSync(d, { recursive: true });
    chmodSync(d, d === dataDir ? statSync(d).mode | 0o111 : 0o711);
  }
}
