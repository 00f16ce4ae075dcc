// What a state backup carries besides the store's records (issue 37: a box that loses its disk
// comes back from its backup and the checkpoint store alone):
//   - the host's own files: `secrets/` (host.key: it seals the api keys handed back at phone login
//     and every checkpoint is encrypted under keys derived from it — without it no checkpoint
//     opens), `ssh/` (the SSH host keys clients have pinned), `tls/` (the generated CA and
//     default certificate) and `acme/` (the ACME account);
//   - the payments' settlement journal (`db/settling.journal`, settling.ts): payments that may have
//     been sent for settlement while their pending mark was not yet committed.
// They are written into the backup's own LMDB copy, under two keys of its `meta` table, so a
// backup stays one LMDB file (every tool that reads one still does) and one file is enough to
// rebuild the box. A restore takes them out of the staged copy before it is swapped in: the live
// store never holds them. The backup is 0600 and must be kept as privately as the host itself.

import { chmodSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { open } from 'lmdb';

const FILES_KEY = 'backup:hostFiles';
const JOURNAL_KEY = 'backup:settlingJournal';
/** The data dir's folders a backup carries (small files: keys, certificates, state). */
export const HOST_DIRS = ['secrets', 'ssh', 'tls', 'acme'] as const;
const MAX_FILE = 1 << 20;
const envOptions = { maxDbs: 64, encoding: 'msgpack', noSubdir: false } as const;

export interface HostFile {
  /** Path under the data dir, e.g. `secrets/host.key`. */
  path: string;
  mode: number;
  data: Buffer;
}

export interface Carried {
  files: HostFile[];
  /** The settlement journal's bytes (empty when there is none). */
  journal: Buffer;
}

/** The host files of `dataDir` a backup carries (regular files only, none over 1 MiB). */
export function collectHostFiles(dataDir: string): HostFile[] {
  const out: HostFile[] = [];
  const walk = (rel: string) => {
    const abs = join(dataDir, rel);
    let names: string[];
    try {
      names = readdirSync(abs).sort();
    } catch {
      return; // absent
    }
    for (const name of names) {
      const r = `${rel}/${name}`;
      const st = lstatSync(join(dataDir, r));
      if (st.isDirectory()) walk(r);
      else if (st.isFile() && st.size <= MAX_FILE && !/\.tmp(-\d+)?$/.test(name))
        out.push({ path: r, mode: st.mode & 0o777, data: readFileSync(join(dataDir, r)) });
    }
  };
  for (const d of HOST_DIRS) walk(d);
  return out;
}

const readJournal = (dataDir: string): Buffer => {
  try {
    return readFileSync(join(dataDir, 'db', 'settling.journal'));
  } catch {
    return Buffer.alloc(0);
  }
};

/** Writes the host files and the journal of `dataDir` into the backup copy in `envDir`. The
 *  journal is read after the copy was made: what it names is a superset of the copy's payments. */
export async function embed(envDir: string, dataDir: string): Promise<{ files: number; journalBytes: number }> {
  const files = collectHostFiles(dataDir);
  const journal = readJournal(dataDir);
  const env = open({ path: envDir, ...envOptions });
  try {
    const meta = env.openDB({ name: 'meta', ...envOptions });
    await meta.put(
      FILES_KEY,
      files.map((f) => ({ path: f.path, mode: f.mode, data: f.data })),
    );
    await meta.put(JOURNAL_KEY, journal);
  } finally {
    await env.close();
  }
  return { files: files.length, journalBytes: journal.length };
}

const toBuffer = (v: unknown): Buffer | undefined => (v instanceof Uint8Array ? Buffer.from(v) : undefined);

/** Takes the carried files out of the staged copy in `envDir` (they are removed from it);
 *  `undefined` for a backup made before backups carried them. */
export async function extract(envDir: string): Promise<Carried | undefined> {
  const env = open({ path: envDir, ...envOptions });
  try {
    const meta = env.openDB({ name: 'meta', ...envOptions });
    const files = meta.get(FILES_KEY) as { path?: unknown; mode?: unknown; data?: unknown }[] | undefined;
    const journal = toBuffer(meta.get(JOURNAL_KEY));
    if (files === undefined && journal === undefined) return undefined;
    await meta.remove(FILES_KEY);
    await meta.remove(JOURNAL_KEY);
    const ok = (f: { path?: unknown; mode?: unknown; data?: unknown }): f is HostFile =>
      typeof f.path === 'string' &&
      HOST_DIRS.some((d) => (f.path as string).startsWith(`${d}/`)) &&
      !(f.path as string).split('/').includes('..') &&
      typeof f.mode === 'number' &&
      toBuffer(f.data) !== undefined;
    return {
      files: (Array.isArray(files) ? files : []).filter(ok).map((f) => ({ path: f.path, mode: f.mode & 0o777, data: toBuffer(f.data)! })),
      journal: journal ?? Buffer.alloc(0),
    };
  } finally {
    await env.close();
  }
}

export interface Placed {
  /** Files written (they were missing). */
  written: string[];
  /** Files that exist with other bytes: kept as they are. */
  differ: string[];
}

/** Writes the carried host files into `dataDir`, never over an existing file (nor through a link). */
export function placeHostFiles(dataDir: string, files: HostFile[]): Placed {
  const placed: Placed = { written: [], differ: [] };
  for (const f of files) {
    const abs = join(dataDir, f.path);
    const there = lstatSync(abs, { throwIfNoEntry: false }); // a link (dangling or not) is there too, and never followed
    if (there) {
      if (!there.isFile() || !readFileSync(abs).equals(f.data)) placed.differ.push(f.path);
      continue;
    }
    mkdirSync(dirname(abs), { recursive: true, mode: 0o700 });
    writeFileSync(abs, f.data, { mode: f.mode, flag: 'wx' });
    chmodSync(abs, f.mode);
    placed.written.push(f.path);
  }
  return placed;
}
