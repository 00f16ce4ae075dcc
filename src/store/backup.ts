// Backups of the store (`rootbox backup FILE`, `rootbox restore FILE`) and who holds it.
//
// A backup is one LMDB file: a compacting copy (mdb_env_copy2 with MDB_CP_COMPACT) written under a
// single read transaction, so it is the store exactly as one commit left it, whatever writers do
// meanwhile — the daemon keeps serving. The copy opens the env read-only beside the daemon (LMDB
// is multi-process: the reader slot keeps the snapshot's pages from being reused) or alone when
// no daemon runs, and never writes the live store. Restore checks that the file is a rootbox
// store whose schema this build understands (an older one is migrated when the daemon next opens
// it), then swaps it in with two renames, keeping the old db as db.before-restore-<time>. Whether
// a daemon runs is the caller's check, with holders() here for processes that map the store.
// The copy also carries the host's secrets, SSH host keys, certificates and the settlement
// journal (backupfiles.ts); a restore puts them back where they are missing.

import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  fstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { open } from 'lmdb';
import { flushPath } from '../durable.js';
import { AppError } from '../errors.js';
import { embed, extract, placeHostFiles, type Placed } from './backupfiles.js';
import { SCHEMA_VERSION_KEY } from './db.js';
import { migrations } from './migrations.js';

/** The schema version this build writes (its newest migration). */
export const SCHEMA_VERSION = migrations.reduce((m, x) => Math.max(m, x.version), 0);

export interface StoreSummary {
  schemaVersion: number;
  /** Records per named database. */
  records: Record<string, number>;
  bytes: number;
}

const storeDir = (dataDir: string) => join(dataDir, 'db');
// noSubdir: a directory whose name has a dot (a temporary one) is still an env directory
const envOptions = { maxDbs: 64, encoding: 'msgpack', noSubdir: false } as const;

/** Checks the two meta pages of an LMDB data file before LMDB maps it: LMDB trusts its file and
 *  crashes the process (SIGSEGV, SIGBUS) on one that is not LMDB or is cut short. Layout of this
 *  lmdb build (data version 2): 24-byte page header, then magic, version, …, the page size at
 *  byte 48 and the last used page at byte 144 of each meta page. */
export function checkDataFile(file: string, what: string): void {
  const fd = openSync(file, 'r');
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(4096);
    const n = readSync(fd, head, 0, head.length, 0);
    const meta = (b: Buffer) => ({
      magic: b.readUInt32LE(24),
      version: b.readUInt32LE(28),
      psize: b.readUInt32LE(48),
      lastPg: Number(b.readBigUInt64LE(144)),
      txnid: b.readBigUInt64LE(152),
    });
    const first = n >= 160 ? meta(head) : undefined;
    if (!first || first.magic !== 0xbeefc0de) throw AppError.of('not_a_backup', `${what} is not an LMDB database (no LMDB meta page at its start)`);
    if (first.version !== 2) throw AppError.of('not_a_backup', `${what} is an LMDB file of data version ${first.version}; this rootbox reads version 2`);
    const psize = first.psize;
    if (psize < 512 || psize > 65536 || (psize & (psize - 1)) !== 0 || size < 2 * psize)
      throw AppError.of('not_a_backup', `${what} is not a whole LMDB database (bad page size or shorter than its two meta pages)`);
    const page1 = Buffer.alloc(160);
    readSync(fd, page1, 0, 160, psize);
    const second = meta(page1);
    const newest = second.magic === 0xbeefc0de && second.txnid > first.txnid ? second : first;
    if ((newest.lastPg + 1) * psize > size)
      throw AppError.of('not_a_backup', `${what} is cut short: ${size} bytes, its last page ends at ${(newest.lastPg + 1) * psize}`);
  } finally {
    closeSync(fd);
  }
}

/** Reads what an env directory holds; not_a_backup when it is no rootbox store. Opens read-only
 *  (LMDB makes a lock.mdb beside data.mdb; callers pass a directory of their own). */
export async function summarize(dir: string, what: string): Promise<StoreSummary> {
  checkDataFile(join(dir, 'data.mdb'), what);
  let env;
  try {
    env = open({ path: dir, ...envOptions, readOnly: true });
  } catch (e) {
    throw AppError.of('not_a_backup', `${what} is not an LMDB database (${(e as Error).message})`);
  }
  try {
    const names = [...env.getKeys()].filter((k): k is string => typeof k === 'string');
    if (!names.includes('meta')) throw AppError.of('not_a_backup', `${what} is an LMDB database but not a rootbox store (no meta table)`);
    const records: Record<string, number> = {};
    let schemaVersion: unknown;
    for (const name of names) {
      const db = env.openDB({ name, ...envOptions });
      records[name] = db.getCount();
      if (name === 'meta') schemaVersion = db.get(SCHEMA_VERSION_KEY);
    }
    if (typeof schemaVersion !== 'number') throw AppError.of('not_a_backup', `${what} is an LMDB database but not a rootbox store (no schema version)`);
    return { schemaVersion, records, bytes: statSync(join(dir, 'data.mdb')).size };
  } catch (e) {
    if (e instanceof AppError) throw e;
    throw AppError.of('not_a_backup', `${what} cannot be read as a rootbox store (${(e as Error).message})`);
  } finally {
    await env.close();
  }
}

/** Writes a consistent, compacted copy of the store of `dataDir` to `file` (replaced
 *  atomically if it exists). Safe while the daemon writes. */
export async function backupStore(dataDir: string, file: string): Promise<StoreSummary & { file: string; hostFiles: number; journalBytes: number }> {
  const src = storeDir(dataDir);
  if (!existsSync(join(src, 'data.mdb'))) throw AppError.of('no_store', `there is no store at ${src}`);
  const target = resolve(file);
  mkdirSync(dirname(target), { recursive: true });
  const tmp = mkdtempSync(join(dirname(target), `.${basename(target)}.`));
  try {
    const env = open({ path: src, ...envOptions, readOnly: true });
    try {
      await env.backup(tmp, true);
    } finally {
      await env.close();
    }
    const copy = join(tmp, 'data.mdb');
    chmodSync(copy, 0o600); // account records, phone numbers, key hashes, the host's secrets: root only
    const carried = await embed(tmp, dataDir);
    flushPath(copy);
    const summary = await summarize(tmp, 'the copy');
    renameSync(copy, target);
    flushPath(dirname(target));
    return { ...summary, file: target, hostFiles: carried.files, journalBytes: carried.journalBytes };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

export interface Restored extends StoreSummary {
  /** Where the store that was there before now is (undefined when there was none). */
  keptAs?: string;
  /** The host files the backup carried, put back where missing (undefined: it carried none). */
  hostFiles?: Placed;
}

/** Replaces the store of `dataDir` by the backup `file`. The caller makes sure no daemon runs. */
export async function restoreStore(dataDir: string, file: string, now = new Date()): Promise<Restored> {
  if (!existsSync(file) || !statSync(file).isFile()) throw AppError.of('not_a_backup', `${file} is not a file`);
  const stamp = now.toISOString().replace(/[:.]/g, '-');
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const stage = join(dataDir, `db.restoring-${stamp}`);
  mkdirSync(stage, { mode: 0o700 });
  try {
    checkDataFile(file, file);
    copyFileSync(file, join(stage, 'data.mdb'));
    chmodSync(join(stage, 'data.mdb'), 0o600);
    flushPath(join(stage, 'data.mdb'));
    const summary = await summarize(stage, file);
    if (summary.schemaVersion > SCHEMA_VERSION) {
      throw AppError.of(
        'store_too_new',
        `${file} has schema version ${summary.schemaVersion}, newer than this rootbox understands (${SCHEMA_VERSION}); restore it with the rootbox that wrote it or a newer one`,
      );
    }
    const carried = await extract(stage);
    if (carried?.journal.length) writeFileSync(join(stage, 'settling.journal'), carried.journal, { mode: 0o600 });
    rmSync(join(stage, 'lock.mdb'), { force: true });
    const live = storeDir(dataDir);
    let keptAs: string | undefined;
    if (existsSync(live)) {
      keptAs = join(dataDir, `db.before-restore-${stamp}`);
      renameSync(live, keptAs);
    }
    try {
      renameSync(stage, live);
    } catch (e) {
      if (keptAs) renameSync(keptAs, live); // put the old store back
      throw e;
    }
    flushPath(dataDir);
    return { ...summary, keptAs, hostFiles: carried && placeHostFiles(dataDir, carried.files) };
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

/** Pids of other processes that have the store of `dataDir` mapped (a daemon, a CLI reading it):
 *  LMDB maps data.mdb and lock.mdb into every process that opens the env. */
export function holders(dataDir: string): number[] {
  let files: string[];
  try {
    files = ['data.mdb', 'lock.mdb'].map((f) => join(realpathSync(storeDir(dataDir)), f));
  } catch {
    return []; // no store
  }
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let maps: string;
    try {
      maps = readFileSync(`/proc/${name}/maps`, 'utf8');
    } catch {
      continue; // gone, or not ours to read
    }
    if (files.some((f) => maps.includes(` ${f}\n`) || maps.endsWith(` ${f}`))) pids.push(Number(name));
  }
  return pids;
}
