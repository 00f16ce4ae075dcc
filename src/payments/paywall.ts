// The x402 paywall, independent of what is sold: terms for an amount and a resource → decode
// and validate the payment header → local checks (viem) → facilitator /verify, the atomic
// (asset, payer, nonce) lock committed while it is under way (undone when it is rejected) → the
// caller's paid work → the record turns pending with the settle request (the store's settlement
// journal, then lmdb) → facilitator /settle → PAYMENT-RESPONSE.
// The work runs at most once per payment; a payment is settled only after the work succeeded.
// Nothing is sent for settlement before the record is pending with everything the reconciler
// (reconcile.ts) needs — the payload, the requirements, the purpose and meta of what it buys, and
// (self-settlement) each signed transaction before its broadcast — so a crash at any point leaves
// either a `locked` record (no money can have moved) or a `pending` one the reconciler finishes. While
// the health check (health.ts) finds payments unusable, every charge answers 503
// payments_unavailable before anything else. The settler is a facilitator or the host itself
// (selfsettle.ts), behind the same port.

import { AppError, type CodeOf } from '../errors.js';
import type { Logger } from '../log/index.js';
import { paymentKey, type PaymentKey, type PaymentRecord, type PaymentStore } from '../store/index.js';
import { checkSignature, checkTerms, parsePayload } from './check.js';
import { decodeHeader } from './codec.js';
import { PayerKeys } from './signer.js';
import { recordOutcome, responseHeaders } from './outcome.js';
import { FacilitatorError, type Facilitator } from './facilitator.js';
import { formatUsd, type NetworkPreset } from './networks.js';
import { challenge, paymentRequired, requirementsFor, type TermsConfig } from './terms.js';
import type { PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo, SettleResponse } from './types.js';
import { metrics } from '../metrics/index.js';
import type { PaymentState } from './health.js';

export interface PaywallOptions {
  net: NetworkPreset;
  /** Recipient; without it every charge answers 503 not_configured. */
  payTo?: string;
  maxTimeoutSeconds: number;
  facilitator: Facilitator;
  store: PaymentStore;
  log: Logger;
  /** Clock in ms (tests move it). */
  now?: () => number;
  /** Says why payments cannot be taken now (health.ts). */
  health?: { refusal(): string | undefined; readonly view: PaymentState };
  /** Who verifies and settles, for the wording of refusals. */
  settlement?: 'facilitator' | 'self';
  /** Cluster mode: the registry's payment locks, so a payment is used once across every host. */
  shared?: SharedPaymentLocks;
}

/** Payment locks every host sees (the cluster registry). */
export interface SharedPaymentLocks {
  /** Locks `key` for this host; false when any host locked it before. */
  lock(key: string): Promise<boolean>;
  /** Gives back a lock no work used (the payment was refused before any work). */
  unlock(key: string): Promise<void>;
  /** The paid work started: the lock can no longer be given back. */
  used(key: string): Promise<void>;
}

export interface ChargeRequest {
  /** Request headers (lowercase names); the payment is read from X-PAYMENT or PAYMENT-SIGNATURE. */
  headers: Record<string, string | string[] | undefined>;
  /** Price in atomic units of the asset. */
  amount: bigint;
  resource: ResourceInfo;
  /** What is bought (`verify`, `recharge`); stored with the payment. */
  purpose: string;
  meta?: Record<string, string>;
}

export interface VerifiedPayment {
  payer: string;
  amount: bigint;
  network: string;
  asset: string;
  nonce: string;
  requirements: PaymentRequirements;
  payload: PaymentPayload;
}

export interface Settlement {
  /** `pending`: the facilitator did not answer in time; the reconciler finishes it. */
  status: 'settled' | 'pending';
  transaction?: string;
  response: SettleResponse;
}

export interface Paid<T> {
  result: T;
  payment: VerifiedPayment;
  settlement: Settlement;
  /** PAYMENT-RESPONSE and X-PAYMENT-RESPONSE, to add to the success reply. */
  headers: Record<string, string>;
}

/** Response headers a browser client may read on paid routes (CORS). */
export const PAYMENT_EXPOSE_HEADERS = 'PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE';

export class Paywall {
  private readonly terms?: TermsConfig;
  private readonly now: () => number;
  private readonly inflight = new Set<string>();
  /** Payments whose settlement this process is running now (the reconciler leaves them alone). */
  private readonly settlingNow = new Set<string>();
  private readonly challenges = new Map<string, AppError>();
  /** Repeat payers' public keys, for the local signature check (signer.ts). */
  private readonly keys = new PayerKeys();

  constructor(private readonly opts: PaywallOptions) {
    this.now = opts.now ?? Date.now;
    if (opts.payTo) this.terms = { net: opts.net, payTo: opts.payTo, maxTimeoutSeconds: opts.maxTimeoutSeconds };
  }

  get configured(): boolean {
    return this.terms !== undefined;
  }

  get network(): NetworkPreset {
    return this.opts.net;
  }

  /** Who settles and whether payments can be taken now (for /v1/info and status). */
  get state(): PaymentState {
    return this.opts.health?.view ?? { settlement: this.opts.settlement ?? 'facilitator', available: true, problems: [], checked_at: null };
  }

  private cfg(): TermsConfig {
    if (!this.terms)
      throw AppError.of('not_configured', 'payments are not configured on this host (no payTo address); the operator must set verify.x402.payTo');
    const why = this.opts.health?.refusal();
    if (why) throw AppError.of('payments_unavailable', `payments cannot be taken on this host right now: ${why}; nothing was charged, retry later`);
    return this.terms;
  }

  private get who(): string {
    return this.opts.settlement === 'self' ? 'the on-chain check' : 'the facilitator';
  }

  /** The `accepts` entry for an amount. */
  requirements(amount: bigint): PaymentRequirements {
    if (!this.terms) this.cfg();
    return requirementsFor(this.terms!, amount);
  }

  /** The terms object (as in the PAYMENT-REQUIRED header). */
  paymentRequired(amount: bigint, resource: ResourceInfo, error = 'payment required'): PaymentRequired {
    if (!this.terms) this.cfg();
    return paymentRequired(this.terms!, amount, resource, error);
  }

  /** The 402 error for an unpaid request. The default one is cached per amount and resource
   *  (the hot path of unpaid traffic); a fresh AppError carries the cached header and body. */
  challenge(amount: bigint, resource: ResourceInfo, code: CodeOf<'payment_required'> = 'payment_required', detail?: string): AppError {
    const cfg = this.cfg();
    metrics.payment('required');
    if (code !== 'payment_required' || detail !== undefined) return challenge(cfg, amount, resource, code, detail ?? code);
    const key = `${amount}|${resource.url}|${resource.description ?? ''}|${resource.mimeType ?? ''}`;
    let c = this.challenges.get(key);
    if (!c) {
      c = challenge(
        cfg,
        amount,
        resource,
        code,
        `pay ${formatUsd(amount)} with x402 (scheme exact, ${this.opts.net.network}) and repeat the request with the X-PAYMENT or PAYMENT-SIGNATURE header`,
      );
      if (this.challenges.size >= 256) this.challenges.clear();
      this.challenges.set(key, c);
    }
    return AppError.of(c.code, c.detail, { headers: c.headers, extra: c.extra });
  }

  hasPayment(headers: ChargeRequest['headers']): boolean {
    return headers['x-payment'] !== undefined || headers['payment-signature'] !== undefined;
  }

  /** Takes payment for `work`: runs it once the payment is verified and locked, settles after.
   *  Each outcome is counted once: required (no payment), settled, pending, or the error's code. */
  async charge<T>(req: ChargeRequest, work: (p: VerifiedPayment) => Promise<T>): Promise<Paid<T>> {
    if (!this.hasPayment(req.headers)) return this.take(req, work); // counted as 'required' by challenge()
    try {
      const paid = await this.take(req, work);
      metrics.payment(paid.settlement.status);
      return paid;
    } catch (e) {
      metrics.payment(e instanceof AppError ? e.code : 'internal');
      throw e;
    }
  }

  private async take<T>(req: ChargeRequest, work: (p: VerifiedPayment) => Promise<T>): Promise<Paid<T>> {
    const cfg = this.cfg();
    const ours = requirementsFor(cfg, req.amount);
    const fail = (code: CodeOf<'payment_required'>, detail: string, headers?: Record<string, string>) =>
      challenge(cfg, req.amount, req.resource, code, detail, headers);
    const raw = req.headers['payment-signature'] ?? req.headers['x-payment'];
    if (raw === undefined) throw this.challenge(req.amount, req.resource);
    let payload: PaymentPayload;
    try {
      payload = parsePayload(decodeHeader(raw));
      checkTerms(payload, ours, Math.floor(this.now() / 1000));
      await checkSignature(payload, cfg.net, this.keys);
    } catch (e) {
      if (e instanceof AppError && e.kind === 'payment_required') throw fail(e.code as CodeOf<'payment_required'>, e.detail);
      throw e;
    }
    const auth = payload.payload.authorization;
    const key = paymentKey(ours.asset, auth.from, auth.nonce);
    const id = key.join(':');
    const used = () => fail('payment_already_used', 'this payment authorization was already used; sign a new one (new nonce) for this request');
    if (this.inflight.has(id) || this.opts.store.isUsed(key)) throw used();
    this.inflight.add(id);
    try {
      // the lock's synced commit is made while the verification's request is on its way (the commit blocks
      // this thread; the request's bytes left on the previous turn): a payment whose verification fails is
      // unlocked again, so it can be presented again as before (a crash in between leaves it locked, as a
      // crash during the work does)
      const verifying = this.opts.facilitator.verify(payload, ours);
      verifying.catch(() => undefined);
      // cluster mode: the registry's lock first, beside the verification (a registry that cannot be
      // reached refuses the payment with 503 registry_unavailable before anything is locked here)
      const shared = this.opts.shared;
      if (shared && !(await shared.lock(id))) throw used();
      await new Promise((r) => setImmediate(r));
      const locked = this.opts.store.lock({
        asset: ours.asset,
        payer: auth.from,
        nonce: auth.nonce,
        purpose: req.purpose,
        meta: req.meta,
        amount: ours.amount,
        network: ours.network,
        payTo: ours.payTo,
        resource: req.resource.url,
        validBefore: Number(auth.validBefore),
        lockedAt: this.now(),
      });
      if (!locked) throw used();
      let verdict;
      const giveBack = () => {
        this.opts.store.unlock(key);
        shared
          ?.unlock(id)
          .catch((err) => this.opts.log.warn('registry payment lock not given back; the payer signs a new nonce', { err: (err as Error).message }));
      };
      try {
        verdict = await verifying;
      } catch (e) {
        giveBack();
        if (!(e instanceof FacilitatorError)) throw e;
        throw AppError.of('facilitator_unavailable', `the payment could not be verified: ${e.message}; nothing was charged, retry later`);
      }
      if (!verdict.isValid) {
        giveBack();
        throw fail(
          'payment_rejected',
          `${this.who} rejected the payment: ${verdict.invalidReason ?? 'no reason given'}${verdict.invalidMessage ? ` (${verdict.invalidMessage.slice(0, 200)})` : ''}`,
        );
      }
      shared?.used(id).catch(() => undefined); // only a refusal before the work gives a lock back
    } finally {
      this.inflight.delete(id);
    }
    const payment: VerifiedPayment = {
      payer: auth.from,
      amount: req.amount,
      network: ours.network,
      asset: ours.asset,
      nonce: auth.nonce,
      requirements: ours,
      payload,
    };
    let result: T;
    try {
      result = await work(payment);
    } catch (e) {
      this.opts.store.update(key, { status: 'abandoned', reason: e instanceof AppError ? e.code : 'internal', updatedAt: this.now() });
      throw e;
    }
    const s = await this.settle(key, payload, ours);
    const out = recordOutcome({ store: this.opts.store, log: this.opts.log, now: this.now() }, key, s, payload, ours);
    const headers = responseHeaders(out.response);
    if (out.kind === 'refused') {
      const who = this.opts.settlement === 'self' ? 'the host' : 'the facilitator';
      throw fail(
        'payment_settlement_failed',
        `${who} could not settle the payment: ${out.response.errorReason ?? 'no reason given'}; nothing was charged`,
        headers,
      );
    }
    const transaction = out.response.transaction || undefined;
    return { result, payment, settlement: { status: out.kind, transaction, response: out.response }, headers };
  }

  /** Records the settlement as under way (pending, with the request), then settles; a transaction the
   *  settler signs is recorded before it is broadcast (flushed to disk: a power cut must not lose the
   *  hash of money that may move). The pending mark is in the store's settlement journal before
   *  anything is sent (store: markSettling, a plain append), so a kill of the process after it leaves
   *  the payment pending at the next start; lmdb commits it without being waited for. Only a power
   *  cut before the kernel writes the journal back can leave the record `locked`, resolved at the
   *  next start as one interrupted (the chain checked when self-settling). Waiting for an lmdb commit
   *  here cost every paid call 0.5–0.7 ms of thread round trips, more when the disk is busy. */
  private async settle(key: PaymentKey, payload: PaymentPayload, ours: PaymentRequirements) {
    const id = key.join(':');
    const store = this.opts.store;
    this.settlingNow.add(id);
    try {
      store
        .markSettling(key, { status: 'pending', settle: { payload, requirements: ours }, reason: 'settling', updatedAt: this.now() })
        .catch((err) => this.opts.log.error('a pending mark was not committed; the settlement journal keeps it', { err }));
      return await this.opts.facilitator.settle(payload, ours, (tx) =>
        store.updateDurable(key, { transaction: tx.hash, settle: { payload, requirements: ours, raw: tx.raw }, updatedAt: this.now() }),
      );
    } finally {
      this.settlingNow.delete(id);
    }
  }

  /** Whether this process is settling the payment of a record now. */
  settling(rec: Pick<PaymentRecord, 'asset' | 'payer' | 'nonce'>): boolean {
    return this.settlingNow.has(paymentKey(rec.asset, rec.payer, rec.nonce).join(':'));
  }

  /** The record of a payment, for operators and tests. */
  record(asset: string, payer: string, nonce: string): PaymentRecord | undefined {
    return this.opts.store.get(paymentKey(asset, payer, nonce));
  }
}
