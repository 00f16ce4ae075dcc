// The x402 facilitator port and its HTTP implementation: POST /verify, POST /settle with
// {x402Version, paymentPayload, paymentRequirements}, GET /supported. Every call has a deadline.
// verify throws FacilitatorError when no answer can be trusted; settle never throws and says
// whether the money moved (settled), definitely did not (refused), or cannot be known (unknown).
// Each request carries the configured authentication (auth.ts: a CDP JWT or fixed headers).

import type { z } from 'zod';
import { DecodedTooLarge, leanFetch } from '../net/index.js';
import type { PaymentRecord } from '../store/index.js';
import type { FacilitatorAuth } from './auth.js';
import {
  settleResponseSchema,
  supportedResponseSchema,
  verifyResponseSchema,
  type PaymentPayload,
  type PaymentRequirements,
  type SettleResponse,
  type SupportedResponse,
  type VerifyResponse,
} from './types.js';

export type SettleResult =
  | { outcome: 'settled'; response: SettleResponse }
  | { outcome: 'refused'; response: SettleResponse }
  /** `transaction`/`raw`: a transaction that was signed and may have been broadcast (self-settlement). */
  | { outcome: 'unknown'; reason: string; transaction?: string; raw?: string };

/** Called by a settler that broadcasts itself, with each transaction it signed, before it is sent:
 *  the caller records it (the send waits for what it returns) so a crash after the broadcast can be
 *  finished from the record. */
export type BeforeSend = (tx: { hash: string; raw: string }) => unknown;

/** What a settler can tell about an authorization from the chain, for a record left locked by a stopped daemon. */
export type Consumed = { by: 'transfer'; transaction: string } | { by: 'cancel' } | null;

export interface Facilitator {
  verify(payload: PaymentPayload, requirements: PaymentRequirements): Promise<VerifyResponse>;
  settle(payload: PaymentPayload, requirements: PaymentRequirements, beforeSend?: BeforeSend): Promise<SettleResult>;
  supported(): Promise<SupportedResponse>;
  /** Finishes a pending settlement from its record without submitting anything new while an earlier
   *  transaction may land (self-settlement); without it the reconciler repeats settle(). */
  resume?(rec: PaymentRecord, beforeSend?: BeforeSend): Promise<SettleResult>;
  /** Whether the authorization was used on chain, and how (self-settlement reads the token). */
  consumed?(payer: string, nonce: string): Promise<Consumed>;
}

export class FacilitatorError extends Error {
  constructor(
    readonly operation: string,
    message: string,
    /** The HTTP status the facilitator answered, when it answered. */
    readonly status?: number,
  ) {
    super(`facilitator ${operation}: ${message}`);
    this.name = 'FacilitatorError';
  }
}

export interface HttpFacilitatorOptions {
  url: string;
  /** Deadline of /verify and /supported in ms. */
  timeoutMs: number;
  /** Deadline of /settle in ms (on-chain settlement is slower). */
  settleTimeoutMs: number;
  /** Headers for each request (CDP JWT, fixed headers). */
  auth?: FacilitatorAuth;
  fetch?: typeof fetch;
}

const MAX_RESPONSE = 64 * 1024;

export class HttpFacilitator implements Facilitator {
  private readonly base: string;
  private readonly fetch: typeof fetch;

  constructor(private readonly opts: HttpFacilitatorOptions) {
    this.base = opts.url.replace(/\/+$/, '');
    this.fetch = opts.fetch ?? leanFetch;
  }

  private async call(op: string, init: RequestInit, timeoutMs: number): Promise<{ status: number; json: unknown }> {
    const signal = AbortSignal.timeout(timeoutMs);
    const url = `${this.base}/${op}`;
    let res: Response;
    try {
      const auth = this.opts.auth ? await this.opts.auth(init.method ?? 'GET', url) : {};
      res = await this.fetch(url, { ...init, headers: { ...(init.headers as Record<string, string>), ...auth }, signal, redirect: 'follow' });
    } catch (e) {
      const why = (e as Error & { cause?: unknown }).cause instanceof DecodedTooLarge ? ((e as Error).cause as Error).message : (e as Error).message;
      throw new FacilitatorError(op, signal.aborted ? `no answer within ${timeoutMs} ms` : `unreachable (${why})`);
    }
    let text: string;
    try {
      text = await res.text();
    } catch {
      throw new FacilitatorError(op, signal.aborted ? `no complete answer within ${timeoutMs} ms` : 'the answer broke off');
    }
    if (text.length > MAX_RESPONSE) throw new FacilitatorError(op, `answer of ${text.length} bytes is too large`);
    try {
      return { status: res.status, json: JSON.parse(text) };
    } catch {
      throw new FacilitatorError(op, `answered ${res.status} with a body that is not JSON`, res.status);
    }
  }

  private post(op: string, payload: PaymentPayload, requirements: PaymentRequirements, timeoutMs: number) {
    return this.call(
      op,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ x402Version: payload.x402Version, paymentPayload: payload, paymentRequirements: requirements }),
      },
      timeoutMs,
    );
  }

  async verify(payload: PaymentPayload, requirements: PaymentRequirements): Promise<VerifyResponse> {
    const { status, json } = await this.post('verify', payload, requirements, this.opts.timeoutMs);
    const r = verifyResponseSchema.safeParse(json);
    if (!r.success) throw new FacilitatorError('verify', `answered ${status} with an unexpected shape`);
    if (status >= 500 && r.data.isValid) throw new FacilitatorError('verify', `answered ${status}`);
    return r.data;
  }

  async settle(payload: PaymentPayload, requirements: PaymentRequirements): Promise<SettleResult> {
    let answer: { status: number; json: unknown };
    try {
      answer = await this.post('settle', payload, requirements, this.opts.settleTimeoutMs);
    } catch (e) {
      return { outcome: 'unknown', reason: (e as Error).message };
    }
    const r = (settleResponseSchema as z.ZodType<SettleResponse>).safeParse(answer.json);
    if (!r.success) return { outcome: 'unknown', reason: `facilitator settle: answered ${answer.status} with an unexpected shape` };
    if (r.data.success && answer.status === 200) return { outcome: 'settled', response: r.data };
    if (!r.data.success && answer.status < 500 && answer.status !== 202) return { outcome: 'refused', response: r.data };
    return { outcome: 'unknown', reason: `facilitator settle: answered ${answer.status} (${r.data.errorReason ?? 'no reason'})` };
  }

  async supported(): Promise<SupportedResponse> {
    const { status, json } = await this.call('supported', { method: 'GET', headers: { accept: 'application/json' } }, this.opts.timeoutMs);
    const r = supportedResponseSchema.safeParse(json);
    if (status !== 200 || !r.success) throw new FacilitatorError('supported', `answered ${status}${r.success ? '' : ' with an unexpected shape'}`, status);
    return r.data;
  }
}
