// When a server's own files last changed: the newest ctime (set by the kernel on every write,
// chmod, rename, create or delete, and never settable by the server's user, unlike mtime) of
// anything in the upper layer of its disk — what the server wrote over the base image. The disk
// image's own mtime is no measure of that: mounting it, the runtime's init files and the overlay's
// work dir change it without the server writing anything. A returning host compares it with the
// newest checkpoint (issue 38: hosting/stalecopies.ts). Symbolic links are not followed.

import { lstatSync, opendirSync } from 'node:fs';
import { join } from 'node:path';

/** The newest ctime (ms) of `dir` and everything under it; undefined when `dir` cannot be read. */
export function newestChange(dir: string): number | undefined {
  let newest: number;
  try {
    newest = lstatSync(dir).ctimeMs;
  } catch {
    return undefined;
  }
  const todo = [dir];
  while (todo.length) {
    const d = todo.pop()!;
    let h;
    try {
      h = opendirSync(d);
    } catch {
      continue; // gone meanwhile, or not a dir we may read: its own ctime counted already
    }
    try {
      for (let e = h.readSync(); e; e = h.readSync()) {
        const p = join(d, e.name);
        try {
          const st = lstatSync(p);
          if (st.ctimeMs > newest) newest = st.ctimeMs;
          if (st.isDirectory()) todo.push(p);
        } catch {
          // removed meanwhile
        }
      }
    } finally {
      h.closeSync();
    }
  }
  return newest;
}
