// The fast u1·G + u2·Q of signature checks (ecmul.ts) against @noble/curves' own arithmetic:
// the same affine point for random scalars and for the edges (0, 1, n − 1, scalars near 2^128
// after the endomorphism's split); a sum that meets the accumulator's x (here one that ends at
// infinity) answers undefined, never a wrong point.

import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { secp256k1 } from '@noble/curves/secp256k1';
import { baseTable, mulAdd, table } from '../../src/payments/ecmul.js';

const Point = secp256k1.ProjectivePoint;
const N = secp256k1.CURVE.n;
const scalar = () => BigInt(`0x${randomBytes(32).toString('hex')}`) % N;
const noble = (q: InstanceType<typeof Point>, u1: bigint, u2: bigint) => Point.BASE.multiplyAndAddUnsafe(q, u1, u2)?.toAffine() ?? null;

test('u1·G + u2·Q is the point @noble/curves computes, for random and edge scalars', () => {
  const q = Point.BASE.multiply(scalar());
  const qt = table(q, 6);
  const edges = [1n, 2n, N - 1n, N - 2n, 2n ** 128n, 2n ** 128n - 1n, 2n ** 255n % N, (N - 1n) / 2n];
  const pairs: [bigint, bigint][] = [...Array.from({ length: 200 }, () => [scalar(), scalar()] as [bigint, bigint])];
  for (const a of edges) for (const b of edges) pairs.push([a, b]);
  for (const [u1, u2] of pairs) {
    const got = mulAdd(baseTable(), u1, qt, u2);
    const want = noble(q, u1, u2);
    assert.ok(got !== undefined, `undecided for ${u1}, ${u2}`);
    assert.equal(got, want === null ? null : { x: want.x, y: want.y });
  }
});

test('a table of another window size gives the same points', () => {
  const q = Point.BASE.multiply(scalar());
  for (const w of [4, 7, 8]) {
    const u1 = scalar();
    const u2 = scalar();
    const want = noble(q, u1, u2)!;
    assert.equal(mulAdd(baseTable(), u1, table(q, w), u2), { x: want.x, y: want.y });
  }
});

test('a sum that meets its own x is left undecided (the caller checks the slow way), not answered wrong', () => {
  // Q = G and u2 = n − u1: the sum is the point at infinity, whose last addition adds a point to its negation
  const g = table(Point.BASE, 6);
  for (let i = 0; i < 20; i++) {
    const u1 = scalar();
    assert.is(mulAdd(baseTable(), u1, g, N - u1), undefined);
  }
});

test.run();
