// Paths inside a server's root that the daemon writes as host root before the server's first
// start (its name files, a fork's identity): every directory on the way must be a real directory
// of that root, never a link — a tenant's `ln -s /etc /etc` in a checkpoint would otherwise have
// the host's own files rewritten when the checkpoint is forked or moved.

import { lstatSync, type Stats } from 'node:fs';
import { join } from 'node:path';

/** The path under root when every component of rel is a real directory (no link), else undefined. */
export function realDir(root: string, rel: string): string | undefined {
  let path = root;
  for (const part of rel.split('/')) {
    path = join(path, part);
    let st: Stats;
    try {
      st = lstatSync(path);
    } catch {
      return undefined;
    }
    if (!st.isDirectory()) return undefined;
  }
  return path;
}
