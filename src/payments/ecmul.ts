// u1·G + u2·Q on secp256k1 in variable time, for checking public signatures (signer.ts): each
// point with a fixed-base table of affine multiples (one per window of a half scalar, split by the
// curve's endomorphism), summed into one Jacobian accumulator by mixed additions (7M + 4S, against
// 12M for @noble/curves' complete projective formula; the tables' Z = 1 is what makes them mixed).
// The endomorphism's λ·P is (β·x, y), so one table serves both halves of a scalar. A mixed addition
// of two points with the same x (a doubling or a sum at infinity, which honest inputs meet with
// negligible chance) is not handled here: the sum answers undefined and the caller checks the slow
// way. Nothing here is secret (digest, signature and public key are all public), so nothing is
// constant-time.

import { invert } from '@noble/curves/abstract/modular';
import { secp256k1 } from '@noble/curves/secp256k1';

const Point = secp256k1.ProjectivePoint;
type Point = InstanceType<typeof Point>;
const { endo, Fp } = secp256k1.CURVE;
const P = Fp.ORDER;
/** Bits of a half scalar (k1, k2 ≤ 2^128 after the split). */
const HALF_BITS = 128;

/** Affine multiples d·2^(W·w)·Q for each window w and digit d in 1..2^(W−1), flattened. */
export interface Table {
  readonly w: number;
  readonly xs: bigint[];
  readonly ys: bigint[];
  /** β·x of each point: the table of λ·Q. */
  readonly bxs: bigint[];
}

/** The table of `q` for windows of `w` bits (w = 6: 23 windows × 32 points, about 110 KB). */
export function table(q: Point, w: number): Table {
  const windows = Math.ceil(HALF_BITS / w) + 1;
  const per = 2 ** (w - 1);
  const points: Point[] = [];
  let base = q;
  for (let i = 0; i < windows; i++) {
    let p = base;
    points.push(p);
    for (let d = 1; d < per; d++) points.push((p = p.add(base)));
    base = p.double(); // 2^(w−1)·base doubled: 2^w·base
  }
  const affine = Point.normalizeZ(points);
  const xs = affine.map((p) => p.px);
  return { w, xs, ys: affine.map((p) => p.py), bxs: xs.map((x) => (x * endo!.beta) % P) };
}

const sub = (a: bigint, b: bigint) => (a >= b ? a - b : a - b + P);

/** A Jacobian accumulator (x = X/Z², y = Y/Z³); `none` until the first point is added. */
class Sum {
  X = 0n;
  Y = 0n;
  Z = 0n;
  none = true;

  /** Adds the affine point (x2, y2); false when it has the accumulator's x (not handled). */
  add(x2: bigint, y2: bigint): boolean {
    if (this.none) {
      this.X = x2;
      this.Y = y2;
      this.Z = 1n;
      this.none = false;
      return true;
    }
    const { X, Y, Z } = this;
    const zz = (Z * Z) % P;
    const h = sub((x2 * zz) % P, X);
    if (h === 0n) return false;
    const r = 2n * sub((((y2 * Z) % P) * zz) % P, Y); // < 2p: every use below reduces
    const hh = (h * h) % P;
    const i = 4n * hh;
    const j = (h * i) % P;
    const v = (X * i) % P;
    const x3 = (((r * r - j - 2n * v) % P) + P) % P;
    this.Y = (((r * sub(v, x3) - 2n * Y * j) % P) + P) % P;
    this.Z = (2n * Z * h) % P; // (Z + h)² − Z² − h²
    this.X = x3;
    return true;
  }
}

/** Adds k·T (k a half scalar, ≥ 0) to `acc`, with x multiplied by β when `lambda` (λ·Q's table)
 *  and y negated when `neg`; false when an addition met the accumulator's x. */
function addMultiple(acc: Sum, t: Table, k: bigint, lambda: boolean, neg: boolean): boolean {
  const { w } = t;
  const per = 2 ** (w - 1);
  const mask = BigInt(2 ** w - 1);
  const shift = BigInt(w);
  const windows = Math.ceil(HALF_BITS / w) + 1;
  for (let i = 0; i < windows; i++) {
    let d = Number(k & mask);
    k >>= shift;
    if (d > per) {
      d -= 2 * per;
      k += 1n;
    }
    if (d === 0) continue;
    const at = i * per + Math.abs(d) - 1;
    const x = lambda ? t.bxs[at] : t.xs[at];
    const y = d < 0 !== neg ? P - t.ys[at] : t.ys[at];
    if (!acc.add(x, y)) return false;
  }
  return k === 0n;
}

/** u1·G + u2·Q as affine (x, y), with G's and Q's tables; null for the point at infinity,
 *  undefined when the fast sum cannot decide (check the slow way). */
export function mulAdd(g: Table, u1: bigint, q: Table, u2: bigint): { x: bigint; y: bigint } | null | undefined {
  const acc = new Sum();
  for (const [t, u] of [
    [g, u1],
    [q, u2],
  ] as const) {
    const { k1neg, k1, k2neg, k2 } = endo!.splitScalar(u);
    if (!addMultiple(acc, t, k1, false, k1neg) || !addMultiple(acc, t, k2, true, k2neg)) return undefined;
  }
  if (acc.none || acc.Z === 0n) return null;
  const zi = invert(acc.Z, P);
  const zi2 = (zi * zi) % P;
  return { x: (acc.X * zi2) % P, y: (((acc.Y * zi2) % P) * zi) % P };
}

/** G's table (built once, on first use: 17 windows × 128 points, about 100 ms). */
let gTable: Table | undefined;
export const baseTable = (): Table => (gTable ??= table(Point.BASE, 8));
