// The LMDB environment: one env under <dataDir>/db with named databases, the schema version
// and its migrations. Area modules (feedback.ts, stats.ts, …) get their databases from here;
// nothing outside src/store touches lmdb.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { AppError } from '../errors.js';

export type Key = string | number | (string | number)[];
export type Db<V = unknown> = Database<V, Key>;

export interface Migration {
  version: number;
  description: string;
  /** Runs inside one synchronous write transaction with the version bump. */
  up(env: LmdbEnv): void;
}

export class LmdbEnv {
  readonly root: RootDatabase<unknown, Key>;
  private readonly dbs = new Map<string, Db<any>>();

  constructor(readonly path: string) {
    mkdirSync(path, { recursive: true, mode: 0o700 });
    this.root = open<unknown, Key>({ path, maxDbs: 64, encoding: 'msgpack' });
  }

  db<V>(name: string): Db<V> {
    let d = this.dbs.get(name);
    if (!d) {
      d = this.root.openDB<V, Key>({ name, encoding: 'msgpack' });
      this.dbs.set(name, d);
    }
    return d as Db<V>;
  }

  /** A synchronous read-write transaction: every read inside sees the writes before it, and all
   *  writes commit together or not at all. Use for check-then-write (locks, allocations).
   *  Durability: the env runs with lmdb-js's default overlappingSync (noSync off): a commit is
   *  made visible first and the same synchronous call then waits for fdatasync outside the write
   *  lock (one fdatasync per transactionSync or lone putSync/removeSync, before it returns, seen
   *  with strace), so a synchronous write that returned survives a kill and a power cut. An
   *  asynchronous write (a Db's put, transaction) resolves once committed, which survives a kill
   *  of the process but is on disk only after lmdb's next flush: write what an answer
   *  acknowledges synchronously. Nested calls become child transactions of the outer one. */
  txSync<T>(fn: () => T): T {
    return this.root.transactionSync(fn);
  }

  /** An asynchronous read-write transaction (lmdb batches it with others' writes), resolved once its
   *  commit is flushed to disk — as durable as txSync when it resolves, without blocking the event
   *  loop while the disk syncs (lmdb's own thread does it; concurrent callers share one fdatasync). */
  async txDurable<T>(fn: () => T): Promise<T> {
    const out = await this.root.transaction(fn);
    await this.root.flushed;
    return out;
  }

  /** An asynchronous read-write transaction resolved once committed, before lmdb's own thread has
   *  flushed it (it starts that fdatasync at once): the commit is in the file (the kernel's page
   *  cache), so it survives a kill of the process, and every later read sees it; only a power cut
   *  within that flush can lose it. For a write whose loss on a power cut a start-up pass resolves. */
  txCommitted<T>(fn: () => T): Promise<T> {
    return Promise.resolve(this.root.transaction(fn));
  }

  /** Read-modify-write of one record in one transaction; undefined when the record is absent. */
  patch<V extends object>(db: Db<V>, key: Key, change: (rec: V) => Partial<V>): V | undefined {
    return this.txSync(() => {
      const rec = db.get(key);
      if (rec === undefined) return undefined;
      const next = { ...rec, ...change(rec) };
      db.putSync(key, next);
      return next;
    });
  }

  async close(): Promise<void> {
    await this.root.close();
  }
}

export const SCHEMA_VERSION_KEY = 'schemaVersion';

/** Opens the env under <dataDir>/db and brings the schema to the newest migration. */
export function openEnv(dataDir: string, migrations: readonly Migration[]): LmdbEnv {
  const env = new LmdbEnv(join(dataDir, 'db'));
  const meta = env.db<number>('meta');
  const latest = migrations.reduce((m, x) => Math.max(m, x.version), 0);
  const current = meta.get(SCHEMA_VERSION_KEY) ?? 0;
  if (current > latest) {
    void env.close();
    throw AppError.of(
      'store_too_new',
      `the database at ${dataDir}/db has schema version ${current}, newer than this daemon understands (${latest}); run a newer rootbox`,
    );
  }
  try {
    for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
      if (m.version <= current) continue;
      env.txSync(() => {
        m.up(env);
        meta.putSync(SCHEMA_VERSION_KEY, m.version);
      });
    }
  } catch (e) {
    void env.close();
    throw e;
  }
  return env;
}
