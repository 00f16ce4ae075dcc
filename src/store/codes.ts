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

  /** Checks and records one send under every key in one synced transaction: `check` gets each
   *  key's send times within `keepMs`, oldest first; a refusal it answers is returned and nothing
   *  is recorded. The slot is taken before the text is sent, so concurrent requests see it. */
  reserveSend<T>(keys: string[], now: number, keepMs: number, check: (sends: number[][]) => T | undefined): T | undefined {
    return this.env.txSync(() => {
      const sends = keys.map((k) => this.recentSends(k, keepMs, now));
      const refused = check(sends);
      if (refused !== undefined) return refused;
      keys.forEach((k, i) => this.sends.putSync(k, [...sends[i], now]));
      return undefined;
    });
  }

  /** Gives back a send reserveSend recorded at `at` (the text was not sent). */
  cancelSend(keys: string[], at: number): void {
    this.env.txSync(() => {
      for (const k of keys) {
        const list = this.sends.get(k) ?? [];
        const i = list.lastIndexOf(at);
        if (i >= 0) this.sends.putSync(k, [...list.slice(0, i), ...list.slice(i + 1)]);
      }
    });
  }
}
