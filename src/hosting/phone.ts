// Phone verification: E.164 numbers, 6-digit codes stored as HMACs, 10-minute expiry, 5
// attempts (then the code is locked), resend limits per number and per IP, each send's slot
// reserved before the text goes out (given back when the provider fails). A number counts as
// proven only when a code sent to it comes back. Codes and send history are kept by a CodeBook
// (the store on a single box, the registry in cluster mode, so limits count across hosts).

import { randomInt } from 'node:crypto';
import { timingSafeEqual } from 'node:crypto';
import { AppError } from '../errors.js';
import { tooMany } from '../ratelimit.js';
import type { SmsSender } from '../sms/index.js';
import type { CodeBook } from './directory.js';
import type { KeySecret } from './keys.js';

export const E164 = /^\+[1-9]\d{6,14}$/;
const CODE_TTL = 10 * 60_000;
const ATTEMPTS = 5;
const HOUR = 3_600_000;
const LIMITS = { perNumberGapMs: 30_000, perNumberPerHour: 5, perIpPerHour: 10 };

export class PhoneVerifier {
  constructor(
    private readonly store: { codes: CodeBook },
    private readonly secret: KeySecret,
    private readonly sms: SmsSender,
    private readonly now: () => number = Date.now,
  ) {}

  private limited(detail: string, retryAfterMs: number): AppError {
    return tooMany('sms_rate_limited', detail, retryAfterMs / 1000);
  }

  /** Texts a fresh code to the number (replacing any pending one). */
  async sendCode(phone: string, ip: string): Promise<{ expiresIn: number }> {
    const t = this.now();
    await this.secret.ready?.();
    // the send's slot is taken (checked and recorded at once) before the text goes out, so
    // concurrent requests — on this host or another — cannot all pass; a failed send gives it back
    const keys = [`phone:${phone}`, `ip:${ip}`];
    const refused = await this.store.codes.reserveSend(keys, t, HOUR, ([byNumber, byIp]) => {
      const last = byNumber[byNumber.length - 1];
      if (last !== undefined && t - last < LIMITS.perNumberGapMs)
        return this.limited('a code was just sent to this number', LIMITS.perNumberGapMs - (t - last));
      if (byNumber.length >= LIMITS.perNumberPerHour) return this.limited('too many codes sent to this number this hour', HOUR - (t - byNumber[0]));
      if (byIp.length >= LIMITS.perIpPerHour) return this.limited('too many codes requested from this address this hour', HOUR - (t - byIp[0]));
      return undefined;
    });
    if (refused) throw refused;
    const code = String(randomInt(0, 1_000_000)).padStart(6, '0');
    try {
      await this.sms.send(phone, `Your rootbox code is ${code}. It expires in 10 minutes. Reply STOP to opt out.`);
    } catch (e) {
      await Promise.resolve(this.store.codes.cancelSend(keys, t)).catch(() => {}); // the slot stays taken: a limit errs on the safe side
      throw e;
    }
    await this.store.codes.put({ phone, codeMac: this.secret.mac(`${phone}:${code}`), expiresAt: t + CODE_TTL, attemptsLeft: ATTEMPTS });
    return { expiresIn: CODE_TTL / 1000 };
  }

  /** Proves the number with the code, or throws 400/429 saying why. */
  async checkCode(phone: string, code: string): Promise<void> {
    await this.secret.ready?.();
    const rec = await this.store.codes.spendAttempt(phone);
    if (!rec) throw AppError.of('code_not_pending', 'no code is pending for this number; send {"phone": …} first to get one');
    if (this.now() > rec.expiresAt) {
      await this.store.codes.remove(phone);
      throw AppError.of('code_expired', 'the code expired; send {"phone": …} again for a new one');
    }
    if (rec.attemptsLeft <= 0) throw tooMany('code_locked', 'too many wrong codes; this code is locked. Send {"phone": …} again for a new one', 30);
    const want = Buffer.from(rec.codeMac, 'hex');
    const got = Buffer.from(this.secret.mac(`${phone}:${code}`), 'hex');
    if (!timingSafeEqual(want, got)) {
      const left = rec.attemptsLeft - 1;
      throw AppError.of('code_invalid', left > 0 ? `wrong code; ${left} attempt(s) left` : 'wrong code; no attempts left, the code is now locked');
    }
    await this.store.codes.remove(phone);
  }
}
