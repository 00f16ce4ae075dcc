// Finishes settlements whose outcome was unknown (facilitator timeout, 5xx, garbage). It repeats
// the same /settle request: EIP-3009 nonces are single-use on chain and facilitators remember
// broadcast transactions, so a repeat can never move the money twice. Outcomes: settled (also
// when the facilitator reports the nonce as already used: the earlier attempt landed), refused,
// or expired when the authorization ran out and no answer ever came. A settler that can finish a
// pending settlement from its record (self-settlement: receipt and authorizationState, never a
// second transfer) does so through resume() instead of a repeated settle.

import type { Logger } from '../log/index.js';
import { paymentKey, type PaymentRecord, type PaymentStore } from '../store/index.js';
import type { Facilitator } from './facilitator.js';
import type { PaymentPayload, PaymentRequirements } from './types.js';

/** After validBefore plus this long, a payment that never got an answer is marked expired. */
export const EXPIRY_GRACE_SECONDS = 3600;

export interface ReconcileSummary {
  settled: number;
  refused: number;
  expired: number;
  pending: number;
}

export type SettledListener = (rec: PaymentRecord) => void;

export class Reconciler {
  private timer?: NodeJS.Timeout;
  private running?: Promise<ReconcileSummary>;
  private readonly listeners: SettledListener[] = [];
  private readonly now: () => number;

  constructor(private readonly opts: { facilitator: Facilitator; store: PaymentStore; log: Logger; now?: () => number }) {
    this.now = opts.now ?? Date.now;
  }

  /** Called once for every pending payment that turns out settled (billing credits recharges here). */
  onSettled(fn: SettledListener): void {
    this.listeners.push(fn);
  }

  /** One pass over the pending payments; concurrent calls share the pass. */
  reconcile(): Promise<ReconcileSummary> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(): Promise<ReconcileSummary> {
    const sum: ReconcileSummary = { settled: 0, refused: 0, expired: 0, pending: 0 };
    for (const rec of this.opts.store.pending()) {
      const key = paymentKey(rec.asset, rec.payer, rec.nonce);
      const nowS = Math.floor(this.now() / 1000);
      const req = rec.settle as { payload: PaymentPayload; requirements: PaymentRequirements } | undefined;
      if (!req) {
        this.opts.store.update(key, { status: 'expired', reason: 'no settle request kept', updatedAt: this.now() });
        sum.expired++;
        continue;
      }
      const fac = this.opts.facilitator;
      const s = fac.resume ? await fac.resume(rec) : await fac.settle(req.payload, req.requirements);
      const attempts = rec.attempts + 1;
      if (s.outcome === 'settled' || (s.outcome === 'refused' && /nonce.*(used|already)/i.test(s.response.errorReason ?? ''))) {
        const tx = s.outcome === 'settled' ? s.response.transaction : undefined;
        const next = this.opts.store.update(key, {
          status: 'settled',
          transaction: tx,
          reason: s.outcome === 'refused' ? (s.response.errorReason ?? undefined) : undefined,
          attempts,
          updatedAt: this.now(),
        });
        sum.settled++;
        this.opts.log.info('pending settlement settled', { payer: rec.payer, nonce: rec.nonce, transaction: tx });
        for (const fn of this.listeners) {
          try {
            if (next) fn(next);
          } catch (e) {
            this.opts.log.error('settled listener failed', { err: e });
          }
        }
      } else if (s.outcome === 'refused') {
        this.opts.store.update(key, { status: 'refused', reason: s.response.errorReason ?? 'refused', attempts, updatedAt: this.now() });
        sum.refused++;
      } else if (nowS > rec.validBefore + EXPIRY_GRACE_SECONDS) {
        this.opts.store.update(key, { status: 'expired', reason: s.reason, attempts, updatedAt: this.now() });
        sum.expired++;
      } else {
        this.opts.store.update(key, {
          attempts,
          reason: s.reason,
          updatedAt: this.now(),
          ...(s.transaction ? { transaction: s.transaction, settle: { ...req, ...(s.raw ? { raw: s.raw } : {}) } } : {}),
        });
        sum.pending++;
      }
    }
    return sum;
  }

  start(intervalMs: number): void {
    this.timer = setInterval(() => void this.reconcile().catch((e) => this.opts.log.error('reconcile failed', { err: e })), intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }
}
