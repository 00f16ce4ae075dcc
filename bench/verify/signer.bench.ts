// Micro-benchmark of the payment signature check (src/payments/signer.ts PayerKeys): a payer's
// first signature (public-key recovery), a repeat payer's (the kept key with its table), and
// viem's recoverAddress as the peer row of the same run; µs per check and the ratio to viem.
// Run: node --import tsx bench/verify/signer.bench.ts [checks]

import { randomBytes } from 'node:crypto';
import { keccak256, recoverAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { PayerKeys } from '../../src/payments/signer.js';

const N = Number(process.argv[2] ?? 400);
const payers = Array.from({ length: 8 }, () => privateKeyToAccount(generatePrivateKey()));
const cases = await Promise.all(
  Array.from({ length: N }, async (_, i) => {
    const hash = keccak256(randomBytes(32)) as Hex;
    const p = payers[i % payers.length];
    return { hash, sig: await p.sign({ hash }), from: p.address };
  }),
);

async function time(label: string, run: (c: (typeof cases)[number]) => unknown): Promise<number> {
  for (const c of cases.slice(0, 20)) await run(c); // warm-up
  const t = performance.now();
  for (const c of cases) await run(c);
  return ((performance.now() - t) * 1000) / cases.length;
}

const viem = await time('viem', async (c) => (await recoverAddress({ hash: c.hash, signature: c.sig })).toLowerCase() === c.from.toLowerCase());
const first = await time('first', (c) => new PayerKeys().signedBy(c.hash, c.sig, c.from));
const keys = new PayerKeys();
const repeat = await time('repeat', (c) => keys.signedBy(c.hash, c.sig, c.from));
console.log(`viem recoverAddress        ${viem.toFixed(0)} µs/check  1.00`);
console.log(`PayerKeys, first signature ${first.toFixed(0)} µs/check  ${(first / viem).toFixed(2)}`);
console.log(`PayerKeys, repeat payer    ${repeat.toFixed(0)} µs/check  ${(repeat / viem).toFixed(2)}`);
