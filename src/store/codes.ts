// Phone verification codes: one pending code per number (HMAC of the code, expiry, attempts
// left) and the send history per number and per IP used to enforce resend limits.

import type { LmdbEnv } from './db.js';

export interface PendingCode {
  phone: string;
  /** hex HMAC-SHA256 of the code under the host secret. */
  codeMac: string;
  expiresAt: number;
  attemptsLeft: number;
}

export class CodeStore {
  private readonly pending;
  private readonly sends;

  constructor(private readonly env: LmdbEnv) {
    this.pending = env.db<PendingCode>('sms_codes');
    this.sends = env.db<number[]>('sms_sends');
  }

  get(phone: string): PendingCode | undefined {
    return this.pending.get(phone);
  }

  put(code: PendingCode): void {
    this.pending.putSync(code.phone, code);
  }

  remove(phone: string): void {
    this.pending.removeSync(phone);
  }

  /** Spends one attempt atomically; returns the record as it was before, or undefined. A record
   *  with no attempts left stays (locked) until it expires or a new code replaces it. */
  spendAttempt(phone: string): PendingCode | undefined {
    return this.env.txSync(() => {
      const rec = this.pending.get(phone);
      if (!rec) return undefined;
      if (rec.attemptsLeft > 0) this.pending.putSync(phone, { ...rec, attemptsLeft: rec.attemptsLeft - 1 });
      return rec;
    });
  }

  /** Send times (ms) recorded under a key (`phone:+1…` or `ip:1.2.3.4`) within the window. */
  recentSends(key: string, windowMs: number, now: number): number[] {
    return (this.sends.get(key) ?? []).filter((t) => now - t < windowMs);
  }

  recordSend(keys: string[], now: number, keepMs: number): void {
    this.env.txSync(() => {
      for (const k of keys) this.sends.putSync(k, [...(this.sends.get(k) ?? []).filter((t) => now - t < keepMs), now]);
    });
  }
}
