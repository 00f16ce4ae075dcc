// Cluster mode's join (registry/join.ts): the mark that this box's shared records (accounts,
// ledger, custom domains, certificates) are in the cluster registry. Written once, only after the
// registry committed every one of them; a box without it copies them at its next start in cluster
// mode (or `rootbox cluster join`), each step safe to repeat.

import type { LmdbEnv } from './db.js';

export interface JoinMark {
  /** The registry (its address, password left out) and host name the box joined as. */
  registry: string;
  host: string;
  at: number;
}

export class JoinStore {
  private readonly db;
  constructor(env: LmdbEnv) {
    this.db = env.db<JoinMark>('cluster_join');
  }

  get(): JoinMark | undefined {
    return this.db.get('joined');
  }

  /** A start as a single box: what it writes from now on is in LMDB only (joined again when it
   *  returns to cluster mode). */
  clear(): void {
    if (this.get()) this.db.removeSync('joined');
  }

  /** Synced: a mark that was written survives a crash. */
  mark(m: JoinMark): void {
    this.db.putSync('joined', m);
  }
}
