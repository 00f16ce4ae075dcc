// Checkpoint records (issue 37): what the API lists and bills of each checkpoint, one per
// manifest in the checkpoint store (the manifest is the checkpoint; this record is its index on
// this host, so a list needs no store round trip and works while the store is away). Keyed
// `<serverId>/<checkpointId>`; checkpoint ids sort by time, so a server's records come oldest first.

import type { LmdbEnv } from './db.js';

export interface CheckpointRecord {
  id: string;
  serverId: string;
  accountId: string;
  createdAt: number;
  kind: 'manual' | 'auto';
  comment?: string;
  /** Bytes of the server's disk it holds (its non-zero chunks). */
  sizeBytes: number;
  /** Sealed bytes it added to the store when taken. */
  newBytes: number;
  /** The disk image's mtime when it was copied: a server whose disk is newer changed since. */
  writtenAt?: number;
}

const key = (serverId: string, id: string) => `${serverId}/${id}`;

export class CheckpointStore {
  private readonly db;
  constructor(env: LmdbEnv) {
    this.db = env.db<CheckpointRecord>('checkpoints');
  }

  /** Resolves once the record is durable. */
  async add(rec: CheckpointRecord): Promise<void> {
    await this.db.put(key(rec.serverId, rec.id), rec);
    await this.db.flushed;
  }

  get(serverId: string, id: string): CheckpointRecord | undefined {
    return this.db.get(key(serverId, id));
  }

  /** The server's checkpoints, newest first. */
  list(serverId: string): CheckpointRecord[] {
    return [...this.db.getRange({ start: `${serverId}/~`, end: `${serverId}/`, reverse: true }).map(({ value }) => value)];
  }

  async remove(serverId: string, id: string): Promise<void> {
    await this.db.remove(key(serverId, id));
    await this.db.flushed;
  }
}
