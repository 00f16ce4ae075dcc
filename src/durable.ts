// Files that outlast a crash and a power loss: a path flushed to disk (a file's bytes, or a
// directory's entries after a rename, a new file or a removal in it), and a file replaced whole —
// a temporary beside it written and flushed, renamed over it, its directory flushed — so that a
// crash at any point leaves either the old file or the whole new one, and a finished replace
// stays. Synchronous: each caller writes a small file at a point where nothing may go on before
// it is kept (a mark before the act it guards).

import { closeSync, fsyncSync, openSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/** Flushes `path` to disk: a file's bytes, or a directory's entries. */
export function flushPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export interface ReplaceOptions {
  /** Mode of a new file (0o600). */
  mode?: number;
  /** How the directory's entry is flushed after the rename (flushPath); false: not at all (a
   *  crash may then leave the old file, never a torn one). */
  flushDir?: ((dir: string) => void) | false;
}

/** Replaces `path` with `data` (see the header); `${path}.tmp` is its temporary. */
export function replaceFile(path: string, data: string | Uint8Array, opts: ReplaceOptions = {}): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, data, { mode: opts.mode ?? 0o600, flush: true });
  renameSync(tmp, path);
  const flushDir = opts.flushDir ?? flushPath;
  if (flushDir) flushDir(dirname(path));
}
