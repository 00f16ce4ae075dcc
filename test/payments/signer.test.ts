// Signature checks with kept payer keys (signer.ts signedBy): the same verdict as viem's
// recoverAddress for a payer's first signature and for every later one, which runs against the
// kept key — genuine signatures with v as 27/28 and 0/1, the high-s twin of a signature, another
// key's signature claiming the payer, a flipped v, a different digest; invalid r, s or v throw;
// the number of kept keys stays bounded; the kept keys belong to their PayerKeys instance.

import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { keccak256, recoverAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { MAX_KEYS, PayerKeys } from '../../src/payments/signer.js';

const keys = new PayerKeys();
const signedBy = keys.signedBy.bind(keys);

const N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
const digest = () => keccak256(randomBytes(32)) as Hex;
const hex64 = (n: bigint) => n.toString(16).padStart(64, '0');
const withV = (sig: Hex, v: number) => `${sig.slice(0, 130)}${v.toString(16).padStart(2, '0')}` as Hex;
const viemSays = async (hash: Hex, sig: Hex, from: string) => (await recoverAddress({ hash, signature: sig })).toLowerCase() === from.toLowerCase();

/** The other valid signature of the same digest: s → n − s, parity flipped. */
function highS(sig: Hex): Hex {
  const s = BigInt(`0x${sig.slice(66, 130)}`);
  const v = parseInt(sig.slice(130), 16);
  return `${sig.slice(0, 66)}${hex64(N - s)}${(v === 27 ? 28 : 27).toString(16)}` as Hex;
}

test('a payer is recognised on the first signature and on every later one (kept key), as viem recovers it', async () => {
  const payer = privateKeyToAccount(generatePrivateKey());
  const other = privateKeyToAccount(generatePrivateKey());
  for (let i = 0; i < 12; i++) {
    const h = digest();
    const sig = await payer.sign({ hash: h });
    const v = parseInt(sig.slice(130), 16);
    const cases: [Hex, Hex, boolean][] = [
      [h, sig, true],
      [h, withV(sig, v - 27), true],
      [h, highS(sig), true],
      [h, withV(sig, v === 27 ? 28 : 27), false],
      [digest(), sig, false],
      [h, await other.sign({ hash: h }), false],
    ];
    for (const [hash, s, want] of cases) {
      assert.is(signedBy(hash, s, payer.address), want, `call ${i}: ${s.slice(-2)}`);
      assert.is(await viemSays(hash, s, payer.address), want);
    }
  }
});

test("another key's signature claiming a payer is refused before and after the payer's key is kept", async () => {
  const payer = privateKeyToAccount(generatePrivateKey());
  const thief = privateKeyToAccount(generatePrivateKey());
  const h = digest();
  assert.is(signedBy(h, await thief.sign({ hash: h }), payer.address), false);
  assert.is(signedBy(h, await payer.sign({ hash: h }), payer.address), true);
  assert.is(signedBy(h, await thief.sign({ hash: h }), payer.address), false);
  assert.is(signedBy(h, await thief.sign({ hash: h }), thief.address), true);
});

test('signatures that cannot be valid throw (r or s zero or ≥ n, unknown v, wrong length)', async () => {
  const payer = privateKeyToAccount(generatePrivateKey());
  const h = digest();
  const sig = await payer.sign({ hash: h });
  signedBy(h, sig, payer.address); // keep the key: both paths
  for (const from of [payer.address, privateKeyToAccount(generatePrivateKey()).address]) {
    assert.throws(() => signedBy(h, `0x${hex64(0n)}${sig.slice(66)}` as Hex, from));
    assert.throws(() => signedBy(h, `${sig.slice(0, 66)}${hex64(N)}${sig.slice(130)}` as Hex, from));
    assert.throws(() => signedBy(h, withV(sig, 29), from));
    assert.throws(() => signedBy(h, sig.slice(0, 128) as Hex, from));
  }
});

test('the kept keys stay bounded; a payer dropped from them is recovered again', async () => {
  const first = privateKeyToAccount(generatePrivateKey());
  const h = digest();
  assert.ok(signedBy(h, await first.sign({ hash: h }), first.address));
  for (let i = 0; i < MAX_KEYS + 2; i++) {
    const a = privateKeyToAccount(generatePrivateKey());
    assert.ok(signedBy(h, await a.sign({ hash: h }), a.address));
  }
  const h2 = digest();
  assert.ok(signedBy(h2, await first.sign({ hash: h2 }), first.address));
  assert.not.ok(signedBy(h2, await first.sign({ hash: digest() }), first.address));
  assert.ok(keys.size <= MAX_KEYS);
});

test('kept keys belong to their owner: another PayerKeys starts empty and keeps its own', async () => {
  const payer = privateKeyToAccount(generatePrivateKey());
  const a = new PayerKeys();
  const b = new PayerKeys(2);
  const h = digest();
  assert.ok(a.signedBy(h, await payer.sign({ hash: h }), payer.address));
  assert.is(a.size, 1);
  assert.is(b.size, 0);
  for (let i = 0; i < 3; i++) {
    const p = privateKeyToAccount(generatePrivateKey());
    assert.ok(b.signedBy(h, await p.sign({ hash: h }), p.address));
  }
  assert.is(b.size, 2);
  assert.is(a.size, 1);
});

test.run();
