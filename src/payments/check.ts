// Local checks of a decoded payment before any network call: the payload's shape, that the
// `accepted` terms are ours, that the EIP-3009 authorization pays our recipient the exact amount
// within a current, bounded validity window, and that its EIP-712 signature recovers `from`
// (65-byte ECDSA; longer smart-wallet signatures are left to the facilitator). The EIP-712 digest is
// written directly with the domain separator cached per network (authorizationDigest); repeat
// payers' public keys are kept by the caller's PayerKeys (signer.ts).

import { domainSeparator, getAddress, keccak256, toHex, type Hex } from 'viem';
import { AppError, type CodeOf } from '../errors.js';
import type { NetworkPreset } from './networks.js';
import type { PayerKeys } from './signer.js';
import { paymentPayloadSchema, type PaymentPayload, type PaymentRequirements } from './types.js';

/** Seconds a validity window may exceed maxTimeoutSeconds (clock skew between payer and us). */
export const WINDOW_SLACK_SECONDS = 60;
/** An authorization must stay valid at least this long for settlement to land (as facilitators require). */
export const MIN_REMAINING_SECONDS = 6;

/** keccak256 of the EIP-3009 struct type (EIP-712 typeHash). */
const TRANSFER_TYPEHASH = keccak256(
  toHex('TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)'),
).slice(2);
const UINT256_MAX = 2n ** 256n - 1n;
/** The token's EIP-712 domain separator, computed once per network. */
const separators = new WeakMap<NetworkPreset, string>();

/** The EIP-712 digest of an authorization: 0x1901 ‖ domain separator (cached) ‖ struct hash, the
 *  words written directly (what viem's hashTypedData computes, without re-deriving the types and
 *  the domain each call). Throws for a value outside its type. */
export function authorizationDigest(net: NetworkPreset, a: PaymentPayload['payload']['authorization']): Hex {
  let ds = separators.get(net);
  if (!ds) {
    ds = domainSeparator({ domain: { name: net.eip712.name, version: net.eip712.version, chainId: net.chainId, verifyingContract: net.asset as Hex } }).slice(
      2,
    );
    separators.set(net, ds);
  }
  const word = (n: bigint) => {
    if (n < 0n || n > UINT256_MAX) throw new Error('uint256 out of range');
    return n.toString(16).padStart(64, '0');
  };
  const addr = (x: string) => getAddress(x).slice(2).toLowerCase().padStart(64, '0');
  if (!/^0x[0-9a-fA-F]{64}$/.test(a.nonce)) throw new Error('nonce is not bytes32');
  const struct = keccak256(
    `0x${TRANSFER_TYPEHASH}${addr(a.from)}${addr(a.to)}${word(BigInt(a.value))}${word(BigInt(a.validAfter))}${word(BigInt(a.validBefore))}${a.nonce.slice(2).toLowerCase()}`,
  ).slice(2);
  return keccak256(`0x1901${ds}${struct}`);
}

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

/** Checks that a 65-byte signature was made by `from` (signer.ts: recovery, or a key the caller's
 *  PayerKeys kept for a repeat payer). */
export async function checkSignature(p: PaymentPayload, net: NetworkPreset, keys: PayerKeys): Promise<void> {
  const { authorization: auth, signature } = p.payload;
  if (signature.length !== 2 + 65 * 2) return; // smart-wallet (ERC-1271/6492): the facilitator checks it
  let ok: boolean;
  try {
    ok = keys.signedBy(authorizationDigest(net, auth), signature as Hex, auth.from);
  } catch {
    throw reject('payment_signature_invalid', 'the payment signature cannot be recovered');
  }
  if (!ok) throw reject('payment_signature_invalid', `the payment signature was not made by ${auth.from}`);
}
