// Whether a 65-byte secp256k1 signature over a digest was made by an address, with the public
// keys of recent repeat payers kept. A payer seen for the first time costs one public-key
// recovery (what viem's recoverAddress does, 2.8 ms in pure JS); the key it yields is kept when
// it belongs to the claimed address. From the payer's second payment on, the check is the
// equivalent verification against the kept key with fixed-base tables (ecmul.ts; variable-time:
// nothing in it is secret): R = (h/s)·G + (r/s)·P must have x = r and the y parity named by v —
// exactly when recovering with that parity would give P. Keys are kept only after a signature
// proved them, so an entry cannot be planted for someone else's address; at most MAX_KEYS (least
// recently used go first; each table is about 110 KB of heap, 14 MB for all). The kept keys
// are a PayerKeys instance owned by its user (the paywall's local checks), not module state.

import { invert } from '@noble/curves/abstract/modular';
import { secp256k1 } from '@noble/curves/secp256k1';
import { keccak256, type Hex } from 'viem';
import { baseTable, mulAdd, table, type Table } from './ecmul.js';

const Point = secp256k1.ProjectivePoint;
type Point = InstanceType<typeof Point>;
const N = secp256k1.CURVE.n;

/** Repeat payers whose public key is kept. */
export const MAX_KEYS = 128;
/** Window of a kept key's table (ecmul.ts): 6 bits, 23 windows × 32 affine points, about 110 KB (7 bits: 7 % faster, 1.7 × the memory). */
const WINDOW = 6;

const addressOf = (p: Point): string => `0x${keccak256(p.toRawBytes(false).subarray(1)).slice(-40)}`;

/** The public keys of recent repeat payers, each proved by a signature, and the check that uses them. */
export class PayerKeys {
  private readonly keys = new Map<string, { point: Point; table?: Table }>();

  constructor(private readonly max = MAX_KEYS) {}

  get size(): number {
    return this.keys.size;
  }

  private keep(who: string, point: Point): void {
    if (this.keys.size >= this.max) this.keys.delete(this.keys.keys().next().value!);
    this.keys.set(who, { point });
  }

  /** True when `signature` (r ‖ s ‖ v, v 0/1/27/28) over `hash` was made by `from`. Throws for a
   *  signature that cannot be valid (r or s outside [1, n), another v). */
  signedBy(hash: Hex, signature: Hex, from: string): boolean {
    if (signature.length !== 132) throw new Error('invalid signature length');
    const v = parseInt(signature.slice(130), 16);
    const parity = v === 0 || v === 27 ? 0 : v === 1 || v === 28 ? 1 : -1;
    if (parity < 0) throw new Error('invalid v');
    const sig = secp256k1.Signature.fromCompact(signature.slice(2, 130));
    const who = from.toLowerCase();
    const known = this.keys.get(who);
    if (!known) {
      const point = sig.addRecoveryBit(parity).recoverPublicKey(hash.slice(2));
      const ok = addressOf(point) === who;
      if (ok) this.keep(who, Point.fromAffine(point.toAffine()));
      return ok;
    }
    this.keys.delete(who);
    this.keys.set(who, known); // most recently used last
    known.table ??= table(known.point, WINDOW);
    const si = invert(sig.s, N);
    const u1 = (BigInt(hash) * si) % N;
    const u2 = (sig.r * si) % N;
    const R = mulAdd(baseTable(), u1, known.table, u2);
    if (R === undefined) return addressOf(sig.addRecoveryBit(parity).recoverPublicKey(hash.slice(2))) === who; // the rare sum not handled fast
    if (R === null) return false;
    const { x, y } = R;
    return x === sig.r && Number(y & 1n) === parity;
  }
}
