// What a settlement attempt leaves behind: the payment's record (settled with its transaction,
// refused with the reason, or pending with what the reconciler needs to finish it) and the
// PAYMENT-RESPONSE the client gets (a pending one says settlement_pending, with the transaction
// hash when one was sent).

import type { Logger } from '../log/index.js';
import type { PaymentKey, PaymentStore } from '../store/index.js';
import { encodeHeader } from './codec.js';
import type { SettleResult } from './facilitator.js';
import type { PaymentPayload, PaymentRequirements, SettleResponse } from './types.js';

export type Outcome = { kind: 'settled' | 'pending' | 'refused'; response: SettleResponse };

/** Writes the outcome without waiting for lmdb (store: updateLater; reads see it at once): the
 *  record was pending, with the settle request, committed before anything was sent, so an outcome a
 *  crash or a power cut loses leaves it pending, and the reconciler finds the same outcome again (a
 *  repeated /settle moves no money twice; credits are once per payment). No commit, and so no wait
 *  for the previous one's fdatasync, on the paid path after the settlement's answer. */
export function recordOutcome(
  d: { store: PaymentStore; log: Logger; now: number },
  key: PaymentKey,
  s: SettleResult,
  payload: PaymentPayload,
  ours: PaymentRequirements,
): Outcome {
  if (s.outcome === 'settled') {
    later(d, key, { status: 'settled', transaction: s.response.transaction, attempts: 1, updatedAt: d.now });
    return { kind: 'settled', response: s.response };
  }
  if (s.outcome === 'refused') {
    later(d, key, { status: 'refused', reason: s.response.errorReason ?? 'refused', attempts: 1, updatedAt: d.now });
    return { kind: 'refused', response: s.response };
  }
  const payer = payload.payload.authorization.from;
  d.log.warn('settlement outcome unknown; recorded as pending', {
    payer,
    nonce: payload.payload.authorization.nonce,
    reason: s.reason,
    transaction: s.transaction,
  });
  const kept = d.store.get(key)?.settle?.raw;
  later(d, key, {
    status: 'pending',
    settle: { payload, requirements: ours, ...(s.raw ? { raw: s.raw } : kept ? { raw: kept } : {}) },
    transaction: s.transaction ?? d.store.get(key)?.transaction,
    reason: s.reason,
    attempts: 1,
    updatedAt: d.now,
  });
  return { kind: 'pending', response: { success: false, errorReason: 'settlement_pending', transaction: s.transaction ?? '', network: ours.network, payer } };
}

function later(d: { store: PaymentStore; log: Logger }, key: PaymentKey, change: Parameters<PaymentStore['updateLater']>[1]): void {
  d.store.updateLater(key, change).catch((err) => d.log.error('a settlement outcome was not written; the reconciler finds it again', { err }));
}

export function responseHeaders(r: SettleResponse): Record<string, string> {
  const v = encodeHeader(r);
  return { 'payment-response': v, 'x-payment-response': v };
}
