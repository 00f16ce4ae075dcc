// Feedback messages sent to POST /feedback: append-only, keyed by time-ordered id.

import type { LmdbEnv } from './db.js';

export interface FeedbackRecord {
  id: string;
  message: string;
  contact?: string;
  ip: string;
  at: number;
}

export class FeedbackStore {
  private readonly db;
  constructor(env: LmdbEnv) {
    this.db = env.db<FeedbackRecord>('feedback');
  }

  /** Resolves once the record is committed. */
  async add(rec: FeedbackRecord): Promise<void> {
    await this.db.put(rec.id, rec);
  }

  get(id: string): FeedbackRecord | undefined {
    return this.db.get(id);
  }

  list(limit = 100): FeedbackRecord[] {
    return [...this.db.getRange({ reverse: true, limit }).map(({ value }) => value)];
  }

  count(): number {
    return this.db.getCount();
  }
}
