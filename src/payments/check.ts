// Local checks of a decoded payment before any network call: the payload's shape, that the
// `accepted` terms are ours, that the EIP-3009 authorization pays our recipient the exact amount
// within a current, bounded validity window, and that its EIP-712 signature recovers `from`
// (65-byte ECDSA; longer smart-wallet signatures are left to the facilitator).

import { getAddress, recoverTypedDataAddress, type Hex } from 'viem';
import { AppError, type CodeOf } from '../errors.js';
import type { NetworkPreset } from './networks.js';
import { paymentPayloadSchema, type PaymentPayload, type PaymentRequirements } from './types.js';

/** Seconds a validity window may exceed maxTimeoutSeconds (clock skew between payer and us). */
export const WINDOW_SLACK_SECONDS = 60;
/** An authorization must stay valid at least this long for settlement to land (as facilitators require). */
export const MIN_REMAINING_SECONDS = 6;

const authorizationTypes = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

const reject = (code: CodeOf<'payment_required'>, detail: string) => AppError.of(code, detail);
const sameAddr = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/** Validates the decoded JSON as an x402 v2 exact-scheme EVM payment payload. */
export function parsePayload(value: unknown): PaymentPayload {
  const r = paymentPayloadSchema.safeParse(value);
  if (r.success) return r.data;
  const i = r.error.issues[0];
  throw reject('payment_invalid', `the payment payload is malformed: ${i.path.join('.') || 'payload'}: ${i.message}`);
}

/** Checks `accepted` against our terms and the authorization against them; throws 402 errors. */
export function checkTerms(p: PaymentPayload, ours: PaymentRequirements, nowSeconds: number): void {
  const a = p.accepted;
  if (a.scheme !== ours.scheme) throw reject('payment_wrong_scheme', `scheme ${a.scheme.slice(0, 40)} is not accepted; pay with ${ours.scheme}`);
  if (a.network !== ours.network) throw reject('payment_wrong_network', `network ${a.network.slice(0, 40)} is not accepted; pay on ${ours.network}`);
  if (!sameAddr(a.asset, ours.asset)) throw reject('payment_wrong_asset', `asset ${a.asset.slice(0, 60)} is not accepted; pay with ${ours.asset}`);
  if (!sameAddr(a.payTo, ours.payTo)) throw reject('payment_wrong_recipient', `the payment names recipient ${a.payTo.slice(0, 60)}; pay ${ours.payTo}`);
  if (a.amount !== ours.amount) throw reject('payment_wrong_amount', `the payment accepts amount ${a.amount.slice(0, 40)}; this resource costs ${ours.amount}`);
  const auth = p.payload.authorization;
  if (!sameAddr(auth.to, ours.payTo)) throw reject('payment_wrong_recipient', `the authorization pays ${auth.to}; pay ${ours.payTo}`);
  if (auth.value !== ours.amount)
    throw reject('payment_wrong_amount', `the authorization transfers ${auth.value.slice(0, 40)}; this resource costs ${ours.amount}`);
  const after = BigInt(auth.validAfter);
  const before = BigInt(auth.validBefore);
  const now = BigInt(nowSeconds);
  if (after > now) throw reject('payment_not_yet_valid', `the authorization is valid only after ${auth.validAfter} (now ${nowSeconds})`);
  if (before < now + BigInt(MIN_REMAINING_SECONDS))
    throw reject('payment_expired', `the authorization expired at ${auth.validBefore} (now ${nowSeconds}); sign a new one`);
  if (before - now > BigInt(ours.maxTimeoutSeconds + WINDOW_SLACK_SECONDS)) {
    throw reject('payment_window_too_long', `the authorization stays valid ${before - now} s; at most ${ours.maxTimeoutSeconds} s are accepted`);
  }
}

/** Recovers the signer of a 65-byte signature and compares it with `from`. */
export async function checkSignature(p: PaymentPayload, net: NetworkPreset): Promise<void> {
  const { authorization: auth, signature } = p.payload;
  if (signature.length !== 2 + 65 * 2) return; // smart-wallet (ERC-1271/6492): the facilitator checks it
  let signer: string;
  try {
    signer = await recoverTypedDataAddress({
      domain: { name: net.eip712.name, version: net.eip712.version, chainId: net.chainId, verifyingContract: net.asset },
      types: authorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: {
        from: getAddress(auth.from),
        to: getAddress(auth.to),
        value: BigInt(auth.value),
        validAfter: BigInt(auth.validAfter),
        validBefore: BigInt(auth.validBefore),
        nonce: auth.nonce as Hex,
      },
      signature: signature as Hex,
    });
  } catch {
    throw reject('payment_signature_invalid', 'the payment signature cannot be recovered');
  }
  if (!sameAddr(signer, auth.from)) throw reject('payment_signature_invalid', `the payment signature was not made by ${auth.from}`);
}
