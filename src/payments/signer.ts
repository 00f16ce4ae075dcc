// Whether a 65-byte secp256k1 signature over a digest was made by an address, with the public
// keys of recent repeat payers kept. A payer seen for the first time costs one public-key
// recovery (what viem's recoverAddress does, 2.8 ms in pure JS); the key it yields is kept when
// it belongs to the claimed address. From the payer's second payment on, the check is the
// equivalent verification against the kept key with precomputed multiplication tables (about
// 0.25 ms, variable-time: nothing in it is secret): R = (h/s)·G + (r/s)·P must have x = r and the y parity named by v — exactly when
// recovering with that parity would give P. Keys are kept only after a signature proved them, so
// an entry cannot be planted for someone else's address; at most MAX_KEYS (least recently used
// go first; each table is about 140 KB of heap, 18 MB for all). The kept keys are a PayerKeys
// instance owned by its user (the paywall's local checks), not module state; the tables are built
// with @noble/curves' public utils.precompute.

import { invert } from '@noble/curves/abstract/modular';
import { secp256k1 } from '@noble/curves/secp256k1';
import { keccak256, type Hex } from 'viem';

const Point = secp256k1.ProjectivePoint;
type Point = InstanceType<typeof Point>;
const N = secp256k1.CURVE.n;

/** Repeat payers whose public key is kept. */
export const MAX_KEYS = 128;
/** wNAF window of a kept key's table: 6 (about 140 KB, 0.55 ms per check) where 4 took half the
 *  memory (75 KB) and 0.9 ms per check, the largest share of a paid call's own time (the table
 *  covers half of a scalar, split by the curve's endomorphism: 2 × 23 additions instead of 2 × 33). */
const WINDOW = 6;

const { endo, Fp } = secp256k1.CURVE;

/** k·P in variable time, for a P with a table (the base point, a kept key): every input of the check
 *  is public (digest, signature, key), as in @noble/curves' own verify. The constant-time multiply
 *  adds a fake point per window and normalises each product (a field inversion): twice the time.
 *  The scalar is split by the curve's endomorphism first, as multiply does: the tables cover half
 *  a scalar (multiplyUnsafe alone is wrong above 128 bits on a tabled point). */
function mulPublic(p: Point, k: bigint): Point {
  const { k1neg, k1, k2neg, k2 } = endo!.splitScalar(k);
  let a = p.multiplyUnsafe(k1);
  let b = p.multiplyUnsafe(k2);
  if (k1neg) a = a.negate();
  if (k2neg) b = b.negate();
  return a.add(new Point(Fp.mul(b.px, endo!.beta), b.py, b.pz));
}

const addressOf = (p: Point): string => `0x${keccak256(p.toRawBytes(false).subarray(1)).slice(-40)}`;

/** The public keys of recent repeat payers, each proved by a signature, and the check that uses them. */
export class PayerKeys {
  private readonly keys = new Map<string, { point: Point; tabled: boolean }>();

  constructor(private readonly max = MAX_KEYS) {}

  get size(): number {
    return this.keys.size;
  }

  private keep(who: string, point: Point): void {
    if (this.keys.size >= this.max) this.keys.delete(this.keys.keys().next().value!);
    this.keys.set(who, { point, tabled: false });
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
    if (!known.tabled) {
      known.point = secp256k1.utils.precompute(WINDOW, known.point);
      known.tabled = true;
    }
    const si = invert(sig.s, N);
    const u1 = (BigInt(hash) * si) % N;
    const u2 = (sig.r * si) % N;
    const R = mulPublic(Point.BASE, u1).add(mulPublic(known.point, u2));
    if (R.equals(Point.ZERO)) return false;
    const { x, y } = R.toAffine();
    return x === sig.r && Number(y & 1n) === parity;
  }
}
