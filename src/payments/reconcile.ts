// Finishes settlements whose outcome was unknown (facilitator timeout, 5xx, garbage). It repeats
// the same /settle request: EIP-3009 nonces are single-use on chain and facilitators remember
// broadcast transactions, so a repeat can never move the money twice. Outcomes: settled (also
// when the facilitator reports the nonce as already used: the earlier attempt landed), refused,
// or expired when the authorization ran out and no answer ever came. A settler that can finish a
// pending settlement from its record (self-settlement: receipt and authorizationState, never a
// second transfer) does so through resume() instead of a repeated settle.
// A pending record is written before anything is sent for settlement, so after a crash the pending
// ones are finished here like any other. At start-up the records a stopped daemon left `locked`
// (paid work interrupted; nothing was sent for settlement) are resolved once: abandoned, unless the
// chain (self-settlement) shows the authorization used by a transfer — that paid us, and is settled.
// x402 v2 facilitators are stateless about settlements (the spec defines no status query and no
// idempotent /settle): a repeated /settle of a settled payment answers success (an idempotent
// facilitator) or a refusal naming the used nonce (the reference facilitator's
// invalid_exact_evm_nonce_already_used), both settled here; no other answer credits anything. A
// settled record is credited by the listeners (billing, once per payment: the credit's source is the
// payment); settlements found before a listener is registered are handed to the first one.

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
  /** Settled before any listener was registered (the start-up pass runs before billing is built). */
  private unheard: PaymentRecord[] = [];
  private readonly now: () => number;

  constructor(
    private readonly opts: {
      facilitator: Facilitator;
      store: PaymentStore;
      log: Logger;
      now?: () => number;
      /** True for a payment this process is settling now (the paywall's own attempt): left alone. */
      busy?: (rec: PaymentRecord) => boolean;
    },
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** Called once for every pending payment that turns out settled (billing credits recharges here). */
  onSettled(fn: SettledListener): void {
    this.listeners.push(fn);
    const missed = this.unheard;
    this.unheard = [];
    for (const rec of missed) this.tell(fn, rec);
  }

  private tell(fn: SettledListener, rec: PaymentRecord): void {
    try {
      fn(rec);
    } catch (e) {
      this.opts.log.error('settled listener failed', { err: e });
    }
  }

  private settled(rec: PaymentRecord): void {
    if (this.listeners.length === 0) this.unheard.push(rec);
    for (const fn of this.listeners) this.tell(fn, rec);
  }

  /** Start-up: resolves the records a stopped daemon left locked (taken before any request is served). */
  async recover(locked: PaymentRecord[] = this.opts.store.locked()): Promise<{ abandoned: number; settled: number; kept: number }> {
    const sum = { abandoned: 0, settled: 0, kept: 0 };
    for (const rec of locked) {
      const key = paymentKey(rec.asset, rec.payer, rec.nonce);
      let used: Awaited<ReturnType<NonNullable<Facilitator['consumed']>>> = null;
      try {
        used = (await this.opts.facilitator.consumed?.(rec.payer, rec.nonce)) ?? null;
      } catch (e) {
        // the chain cannot be read now: left locked, tried again at the next start
        this.opts.log.warn('an interrupted payment could not be checked on chain; left locked', {
          payer: rec.payer,
          nonce: rec.nonce,
          err: (e as Error).message,
        });
        sum.kept++;
        continue;
      }
      if (used?.by === 'transfer') {
        const next = this.opts.store.update(key, {
          status: 'settled',
          transaction: used.transaction,
          reason: 'interrupted during the paid work; the authorization was used on chain by a transfer',
          updatedAt: this.now(),
        });
        sum.settled++;
        if (next) this.settled(next);
        continue;
      }
      this.opts.store.update(key, {
        status: 'abandoned',
        reason: `interrupted: the daemon stopped during the paid work, before settlement${used ? ' (the payer canceled the authorization)' : ''}`,
        updatedAt: this.now(),
      });
      sum.abandoned++;
    }
    if (locked.length) this.opts.log.info('resolved payments a stopped daemon left locked', sum);
    return sum;
  }

  /** One pass over the pending payments; concurrent calls share the pass. */
  reconcile(): Promise<ReconcileSummary> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(): Promise<ReconcileSummary> {
    const sum: ReconcileSummary = { settled: 0, refused: 0, expired: 0, pending: 0 };
    for (const rec of this.opts.store.pending()) {
      if (this.opts.busy?.(rec)) continue;
      const key = paymentKey(rec.asset, rec.payer, rec.nonce);
      const nowS = Math.floor(this.now() / 1000);
      const req = rec.settle as { payload: PaymentPayload; requirements: PaymentRequirements } | undefined;
      if (!req) {
        this.opts.store.update(key, { status: 'expired', reason: 'no settle request kept', updatedAt: this.now() });
        sum.expired++;
        continue;
      }
      const fac = this.opts.facilitator;
      const record = (tx: { hash: string; raw: string }) =>
        this.opts.store.updateDurable(key, { transaction: tx.hash, settle: { ...req, raw: tx.raw }, updatedAt: this.now() });
      const s = fac.resume ? await fac.resume(rec, record) : await fac.settle(req.payload, req.requirements);
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
        if (next) this.settled(next);
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

  /** Resolves what a stopped daemon left (locked records, then a pass over the pending ones) and
   *  reconciles every intervalMs. Call it before requests are served. */
  start(intervalMs: number): void {
    const locked = this.opts.store.locked();
    this.running = this.recover(locked)
      .then(() => this.pass())
      .catch((e) => {
        this.opts.log.error('reconcile failed', { err: e });
        return { settled: 0, refused: 0, expired: 0, pending: 0 };
      })
      .finally(() => (this.running = undefined));
    this.timer = setInterval(() => void this.reconcile().catch((e) => this.opts.log.error('reconcile failed', { err: e })), intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }
}
