// The embedded BlobStore: a directory on the host (<dataDir>/checkpoints), so one box gets
// checkpoints, restore and fork with nothing to install. A key is a relative path under it.
// A put writes a temporary file beside its target (`.<name>.<random>.tmp`), fsyncs it, renames it
// over the target and fsyncs the directory: a reader sees the old blob or the new one, never a
// half-written one, and a kill -9 leaves at most a temporary file, which list() never shows and
// sweepTemp() removes. Keys are checked (blobs.ts: [A-Za-z0-9._-] segments, no `.`/`..`) before
// any path is built from them.

import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { BlobStore } from './blobs.js';

const SEGMENT = /^[A-Za-z0-9._-]+$/;
const MAX_KEY = 1024;

/** Whether a key is one a backend takes: relative, '/'-separated [A-Za-z0-9._-] segments, none
 *  of them `.` or `..` or starting with `.` (the directory backend's temporary files do). */
export function validKey(key: string): boolean {
  if (key.length === 0 || key.length > MAX_KEY) return false;
  return key.split('/').every((s) => SEGMENT.test(s) && !s.startsWith('.'));
}

function checkKey(key: string): void {
  if (!validKey(key)) throw new Error(`invalid blob key ${JSON.stringify(key.slice(0, 80))}`);
}

function checkPrefix(prefix: string): void {
  if (prefix === '') return;
  const p = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  checkKey(p);
}

const isMissing = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR';

async function fsyncDir(dir: string): Promise<void> {
  const fd = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await fd.sync();
  } finally {
    await fd.close();
  }
}

export class DirBlobStore implements BlobStore {
  readonly kind = 'dir' as const;

  constructor(readonly where: string) {}

  private path(key: string): string {
    checkKey(key);
    return join(this.where, ...key.split('/'));
  }

  async put(key: string, body: Uint8Array): Promise<void> {
    const target = this.path(key);
    const dir = dirname(target);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const tmp = join(dir, `.${key.split('/').pop()}.${randomBytes(6).toString('hex')}.tmp`);
    const fd = await open(tmp, 'wx', 0o600);
    try {
      await fd.writeFile(body);
      await fd.sync();
    } catch (e) {
      await fd.close();
      await rm(tmp, { force: true });
      throw e;
    }
    await fd.close();
    try {
      await rename(tmp, target);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
    await fsyncDir(dir);
  }

  async get(key: string): Promise<Uint8Array | null> {
    try {
      return await readFile(this.path(key));
    } catch (e) {
      if (isMissing(e)) return null;
      throw e;
    }
  }

  async has(key: string): Promise<boolean> {
    try {
      return (await stat(this.path(key))).isFile();
    } catch (e) {
      if (isMissing(e)) return false;
      throw e;
    }
  }

  async *list(prefix: string): AsyncIterable<{ key: string; size: number }> {
    checkPrefix(prefix);
    // walk the deepest directory the prefix names whole, then filter by the prefix
    const cut = prefix.lastIndexOf('/');
    const base = cut < 0 ? '' : prefix.slice(0, cut);
    const stack = [base];
    while (stack.length) {
      const rel = stack.pop() as string;
      let entries;
      try {
        entries = await readdir(rel ? join(this.where, ...rel.split('/')) : this.where, { withFileTypes: true });
      } catch (e) {
        if (isMissing(e)) continue;
        throw e;
      }
      for (const e of entries) {
        if (e.name.startsWith('.')) continue; // temporary files
        const key = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) {
          if (key.startsWith(prefix) || prefix.startsWith(`${key}/`)) stack.push(key);
        } else if (e.isFile() && key.startsWith(prefix)) {
          const s = await stat(join(this.where, ...key.split('/'))).catch(() => undefined);
          if (s) yield { key, size: s.size };
        }
      }
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.path(key), { force: true });
  }

  /** Removes temporary files a killed put left (older than `olderThanMs`); returns how many. */
  async sweepTemp(olderThanMs: number, now = Date.now()): Promise<number> {
    let n = 0;
    const walk = async (dir: string): Promise<void> => {
      let entries;
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch (e) {
        if (isMissing(e)) return;
        throw e;
      }
      for (const e of entries) {
        const p = join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.name.startsWith('.') && e.name.endsWith('.tmp')) {
          const s = await stat(p).catch(() => undefined);
          if (s && now - s.mtimeMs > olderThanMs) (await rm(p, { force: true }), n++);
        }
      }
    };
    await walk(this.where);
    return n;
  }

  async close(): Promise<void> {}
}
