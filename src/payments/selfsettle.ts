// Self-settlement (verify.x402.settlement "self"): the host is its own facilitator. verify (before
// the paid work) reads the chain in one JSON-RPC batch: the authorization's nonce unused, the
// payer's balance, and an eth_estimateGas of transferWithAuthorization from the gas wallet (it
// reverts exactly as an eth_call simulation would). settle (after the work) signs
// transferWithAuthorization with the gas wallet at that estimate (one signer at a time: the gas
// nonce, counted locally between reads), sends it and polls for the receipt (at once, after 5 ms —
// a node that mines on arrival, like anvil's automine, may answer the send just before the block —
// then 25 ms doubling up to pollMs) until the deadline; no receipt by then is `unknown` (pending) with the transaction kept.
// Before the broadcast the payer's balance and the authorization's state are read again, in one
// batch started with the fee read and awaited after signing (no added round trip): a payer who moved
// the funds during the work, or an authorization used meanwhile, gets no broadcast (withheld: the gas
// wallet pays for no revert) and the settlement is refused (or settled, when another transaction
// used the authorization to pay us). Each signed transaction is handed to the caller's beforeSend
// before it is sent, so a crash after the broadcast is finished from the record. Transfers mined,
// reverted (gas paid for nothing) and withheld are counted (rootbox_settlement_transfers_total).
// resume (the reconciler) never builds a second transfer while the first may
// still land: it reads the receipt and authorizationState, re-broadcasts the same signed
// transaction if the node lost it, and signs anew only when that one can no longer be mined
// (refused as stale) and the authorization is still unused — the EIP-3009 nonce admits one
// transfer, so the money can never move twice.

import { readFileSync, statSync } from 'node:fs';
import { getAddress, keccak256, type Hex } from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import type { Logger } from '../log/index.js';
import type { PaymentRecord } from '../store/index.js';
import { metrics } from '../metrics/index.js';
import { RpcError, RpcUnreachable, transferData, type Chain, type TransferCall } from './chain.js';
import { FacilitatorError, type BeforeSend, type Consumed, type Facilitator, type SettleResult } from './facilitator.js';
import type { PaymentPayload, PaymentRequirements, SettleResponse, SupportedResponse, VerifyResponse } from './types.js';

/** Reads the gas wallet's key: a file of mode 0600 or stricter holding a 0x-prefixed 32-byte hex key. */
export function readGasKey(file: string): PrivateKeyAccount {
  let mode: number;
  let text: string;
  try {
    mode = statSync(file).mode;
    text = readFileSync(file, 'utf8').trim();
  } catch (e) {
    throw new Error(`verify.x402.gasKeyFile cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (mode & 0o077) throw new Error(`verify.x402.gasKeyFile is readable by others (mode ${(mode & 0o777).toString(8)}); chmod 600 it`);
  const hex = text.startsWith('0x') ? text : `0x${text}`;
  if (!/^0x[0-9a-fA-F]{64}$/.test(hex)) throw new Error('verify.x402.gasKeyFile does not hold a 32-byte hex private key');
  return privateKeyToAccount(hex as Hex);
}

export interface SelfSettlerOptions {
  chain: Chain;
  wallet: PrivateKeyAccount;
  chainId: number;
  network: string;
  /** The EIP-3009 token contract. */
  token: Hex;
  /** Deadline of submitting and waiting for the receipt. */
  settleTimeoutMs: number;
  pollMs?: number;
  log: Logger;
  /** Called when a transaction of ours was mined (the gas balance changed). */
  onMined?: () => void;
  /** The clock an authorization's validBefore is compared with (Date.now when not given). */
  now?: () => number;
}

const toCall = (p: PaymentPayload): TransferCall => {
  const a = p.payload.authorization;
  return {
    from: getAddress(a.from),
    to: getAddress(a.to),
    value: BigInt(a.value),
    validAfter: BigInt(a.validAfter),
    validBefore: BigInt(a.validBefore),
    nonce: a.nonce as Hex,
    signature: p.payload.signature as Hex,
  };
};

type Submitted = { hash: Hex; raw: Hex; sent: boolean; unreachable?: boolean; error?: string; withheld?: 'used' | 'balance'; balance?: bigint };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How long the gas wallet's nonce is counted locally before it is read from the chain again. */
export const NONCE_RESYNC_MS = 5000;

export class SelfSettler implements Facilitator {
  private signing: Promise<unknown> = Promise.resolve();
  /** The gas estimate of a verified payment, for its settlement (the paywall passes the same payload object). */
  private readonly gas = new WeakMap<PaymentPayload, bigint>();
  private nonce?: { next: number; at: number };
  private readonly pollMs: number;
  private readonly now: () => number;

  constructor(private readonly o: SelfSettlerOptions) {
    this.pollMs = o.pollMs ?? 200;
    this.now = o.now ?? Date.now;
  }

  get address(): Hex {
    return this.o.wallet.address;
  }

  private answer(success: boolean, t: TransferCall, transaction: string, errorReason?: string): SettleResponse {
    return { success, transaction, network: this.o.network, payer: t.from, amount: t.value.toString(), ...(errorReason ? { errorReason } : {}) };
  }

  async verify(p: PaymentPayload, _r: PaymentRequirements): Promise<VerifyResponse> {
    const t = toCall(p);
    const invalid = (invalidReason: string, invalidMessage: string) => ({ isValid: false, invalidReason, invalidMessage, payer: t.from });
    if (t.signature.length !== 132) return invalid('unsupported_signature', 'self-settlement takes 65-byte ECDSA signatures only');
    try {
      const { used, balance, gas, revert } = await this.o.chain.preflight(this.address, t);
      if (used) return invalid('nonce_already_used', 'the authorization nonce was already used on chain');
      if (balance < t.value) return invalid('insufficient_funds', `the payer holds ${balance} atomic units; the payment needs ${t.value}`);
      if (gas === null) return invalid('simulation_failed', `transferWithAuthorization would revert: ${(revert ?? 'reverted').slice(0, 160)}`);
      this.gas.set(p, gas);
      return { isValid: true, payer: t.from };
    } catch (e) {
      if (e instanceof RpcUnreachable) throw new FacilitatorError('verify', `the chain (RPC) did not answer: ${e.message}`);
      if (e instanceof RpcError) throw new FacilitatorError('verify', `the chain (RPC) answered an error: ${e.message}`);
      throw e;
    }
  }

  async supported(): Promise<SupportedResponse> {
    return { kinds: [{ x402Version: 2, scheme: 'exact', network: this.o.network }], extensions: [], signers: { [this.o.network]: [this.address] } };
  }

  /** The gas wallet's next nonce: read from the chain (pending) at most every NONCE_RESYNC_MS, counted here between. */
  private async nextNonce(): Promise<number> {
    if (!this.nonce || Date.now() - this.nonce.at > NONCE_RESYNC_MS) this.nonce = { next: await this.o.chain.pendingNonce(this.address), at: Date.now() };
    return this.nonce.next++;
  }

  /** Signs and sends one transfer; one at a time, so each takes the next gas nonce. A send the node refuses
   *  for its nonce (the wallet used elsewhere) is signed once more with the chain's nonce. */
  private submit(t: TransferCall, estimate: bigint | undefined, beforeSend?: BeforeSend): Promise<Submitted> {
    const run = async (): Promise<Submitted> => {
      const c = this.o.chain;
      // the payer's balance and the authorization read again, beside the fee read; awaited after signing
      const state = c.payerState(t);
      state.catch(() => undefined);
      // the estimate made before the work; estimated here when there is none (the reconciler's resume)
      const [gas, fees] = await Promise.all([estimate ?? c.estimateGas(this.address, t), c.fees()]);
      for (let attempt = 0; ; attempt++) {
        const raw = await this.o.wallet.signTransaction({
          type: 'eip1559',
          chainId: this.o.chainId,
          to: this.o.token,
          data: transferData(t),
          nonce: await this.nextNonce(),
          gas: (gas * 12n) / 10n,
          ...fees,
        });
        const hash = keccak256(raw);
        if (attempt === 0) {
          const now = await state.catch((e: unknown) => {
            this.nonce = undefined; // nothing sent: the gas nonce taken for it is read again
            throw e;
          });
          const withheld = now.used ? 'used' : now.balance < t.value ? 'balance' : undefined;
          if (withheld) {
            this.nonce = undefined; // the gas nonce taken for this transaction stays unused: read it again
            metrics.settlementTransfer('withheld');
            return { hash, raw, sent: false, withheld, balance: now.balance };
          }
        }
        await beforeSend?.({ hash, raw });
        try {
          await c.sendRaw(raw);
          return { hash, raw, sent: true };
        } catch (e) {
          this.nonce = undefined;
          const unreachable = e instanceof RpcUnreachable;
          if (!unreachable && attempt === 0 && /nonce/i.test((e as Error).message)) continue;
          return { hash, raw, sent: false, unreachable, error: (e as Error).message };
        }
      }
    };
    const next = this.signing.then(run, run);
    this.signing = next.catch(() => undefined);
    return next;
  }

  settle(p: PaymentPayload, _r: PaymentRequirements, beforeSend?: BeforeSend): Promise<SettleResult> {
    const gas = this.gas.get(p);
    this.gas.delete(p);
    return this.first(p, gas, beforeSend);
  }

  private async first(p: PaymentPayload, gas?: bigint, beforeSend?: BeforeSend): Promise<SettleResult> {
    const t = toCall(p);
    const deadline = Date.now() + this.o.settleTimeoutMs;
    if (BigInt(Math.floor(this.now() / 1000) + 2) >= t.validBefore)
      return { outcome: 'refused', response: this.answer(false, t, '', 'authorization_expired: it ran out before the work was done') };
    let s: Submitted;
    try {
      s = await this.submit(t, gas, beforeSend);
    } catch (e) {
      if (e instanceof RpcUnreachable) return { outcome: 'unknown', reason: e.message };
      // the estimate (the reconciler's path) reverted, or the node answered an error: the transfer cannot happen now (spent balance, used nonce)
      return this.afterRevert(t, (e as Error).message);
    }
    if (s.withheld === 'balance')
      return {
        outcome: 'refused',
        response: this.answer(
          false,
          t,
          '',
          `insufficient_funds: the payer holds ${s.balance} atomic units, the payment needs ${t.value} (moved during the work); not broadcast`,
        ),
      };
    if (s.withheld === 'used') return this.afterRevert(t, 'the authorization was used during the work; not broadcast');
    if (!s.sent) {
      if (!s.unreachable) return this.afterRevert(t, s.error ?? 'refused by the node');
      return { outcome: 'unknown', reason: `sending the transaction: ${s.error}`, transaction: s.hash, raw: s.raw };
    }
    return this.wait(t, s.hash, s.raw, deadline);
  }

  /** Polls for the receipt until the deadline; RPC errors on the way are waited out. */
  private async wait(t: TransferCall, hash: Hex, raw: Hex | undefined, deadline: number): Promise<SettleResult> {
    let last = 'no receipt yet';
    let polls = 0;
    for (;;) {
      try {
        const rc = await this.o.chain.receipt(hash);
        if (rc) this.o.onMined?.();
        if (rc) metrics.settlementTransfer(rc.status === 'success' ? 'mined' : 'reverted');
        if (rc?.status === 'success') return { outcome: 'settled', response: this.answer(true, t, hash) };
        if (rc?.status === 'reverted') return this.afterRevert(t, `transaction ${hash} reverted`);
      } catch (e) {
        last = (e as Error).message;
      }
      const pause = Math.min(this.pollMs, polls++ === 0 ? 5 : 25 * 2 ** (polls - 2));
      if (Date.now() + pause > deadline) break;
      await sleep(pause);
    }
    return { outcome: 'unknown', reason: `no receipt within the deadline (${last})`, transaction: hash, raw };
  }

  /** Our transfer cannot land: settled anyway if another transaction used the authorization (it pays us), else refused. */
  private async afterRevert(t: TransferCall, why: string): Promise<SettleResult> {
    try {
      if (await this.o.chain.authorizationUsed(t.from, t.nonce)) {
        const by = await this.o.chain.usedBy(t.from, t.nonce);
        if (by) return { outcome: 'settled', response: this.answer(true, t, by) };
        return { outcome: 'refused', response: this.answer(false, t, '', 'authorization_canceled') };
      }
    } catch (e) {
      return { outcome: 'unknown', reason: (e as Error).message };
    }
    return { outcome: 'refused', response: this.answer(false, t, '', `transaction_failed: ${why.slice(0, 160)}`) };
  }

  async resume(rec: PaymentRecord, beforeSend?: BeforeSend): Promise<SettleResult> {
    const req = rec.settle as { payload: PaymentPayload; requirements: PaymentRequirements; raw?: Hex } | undefined;
    if (!req) return { outcome: 'unknown', reason: 'no settle request kept' };
    return this.finish(req.payload, rec.transaction as Hex | undefined, req.raw, beforeSend);
  }

  /** Whether the authorization was used on chain: by a transfer (which paid the authorization's recipient) or a cancellation. */
  async consumed(payer: string, nonce: string): Promise<Consumed> {
    const c = this.o.chain;
    if (!(await c.authorizationUsed(getAddress(payer), nonce as Hex))) return null;
    const by = await c.usedBy(getAddress(payer), nonce as Hex);
    return by ? { by: 'transfer', transaction: by } : { by: 'cancel' };
  }

  private async finish(p: PaymentPayload, hash: Hex | undefined, raw: Hex | undefined, beforeSend?: BeforeSend): Promise<SettleResult> {
    const t = toCall(p);
    const c = this.o.chain;
    const deadline = Date.now() + this.o.settleTimeoutMs;
    try {
      if (hash) {
        const rc = await c.receipt(hash);
        if (rc?.status === 'success') return { outcome: 'settled', response: this.answer(true, t, hash) };
      }
      if (await c.authorizationUsed(t.from, t.nonce)) return this.afterRevert(t, 'authorization used');
      if (BigInt(Math.floor(this.now() / 1000)) >= t.validBefore)
        return { outcome: 'refused', response: this.answer(false, t, '', 'authorization_expired_unsettled') };
      if (hash && (await c.knows(hash))) return this.wait(t, hash, raw, deadline);
      if (hash && raw) {
        try {
          await c.sendRaw(raw);
          this.o.log.info('re-broadcast a pending settlement transaction', { transaction: hash, payer: t.from });
          return this.wait(t, hash, raw, deadline);
        } catch (e) {
          if (e instanceof RpcUnreachable) throw e;
          this.o.log.warn('the node refused the pending settlement transaction; signing it anew', { transaction: hash, err: (e as Error).message });
        }
      }
    } catch (e) {
      return { outcome: 'unknown', reason: (e as Error).message, transaction: hash, raw };
    }
    return this.first(p, undefined, beforeSend);
  }
}
