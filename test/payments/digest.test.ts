// The EIP-712 digest of a payment authorization written directly (check.ts authorizationDigest)
// equals viem's hashTypedData for the same domain and message, for random authorizations on the
// preset networks and a custom one; values outside their types are refused, and a signature
// made with viem's signTypedData still recovers its signer through checkSignature.

import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { getAddress, hashTypedData, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { authorizationDigest, checkSignature } from '../../src/payments/check.js';
import { PayerKeys } from '../../src/payments/signer.js';
import { NETWORKS } from '../../src/payments/networks.js';
import type { NetworkPreset } from '../../src/payments/networks.js';
import { transferTypes as types } from './fixtures/payer.js';

const custom = {
  ...Object.values(NETWORKS)[0],
  chainId: 31337,
  asset: `0x${randomBytes(20).toString('hex')}`,
  eip712: { name: 'USD Coin', version: '2' },
} as NetworkPreset;
const nets: NetworkPreset[] = [...Object.values(NETWORKS), custom];
const addr = () => `0x${randomBytes(20).toString('hex')}`;
const uint = () => BigInt(`0x${randomBytes(1 + (randomBytes(1)[0] % 32)).toString('hex')}`).toString();
const auth = () => ({
  from: addr(),
  to: addr().toUpperCase().replace('0X', '0x'),
  value: uint(),
  validAfter: uint(),
  validBefore: uint(),
  nonce: `0x${randomBytes(32).toString('hex')}`,
});

const viemDigest = (net: NetworkPreset, a: ReturnType<typeof auth>) =>
  hashTypedData({
    domain: { name: net.eip712.name, version: net.eip712.version, chainId: net.chainId, verifyingContract: net.asset as Hex },
    types,
    primaryType: 'TransferWithAuthorization',
    message: {
      ...a,
      from: getAddress(a.from),
      to: getAddress(a.to),
      value: BigInt(a.value),
      validAfter: BigInt(a.validAfter),
      validBefore: BigInt(a.validBefore),
      nonce: a.nonce as Hex,
    },
  });

test('the digest equals viem hashTypedData on every network, for random authorizations', () => {
  for (const net of nets)
    for (let i = 0; i < 50; i++) {
      const a = auth();
      assert.is(authorizationDigest(net, a), viemDigest(net, a));
    }
});

test('values outside their types are refused', () => {
  const net = nets[0];
  assert.throws(() => authorizationDigest(net, { ...auth(), value: (2n ** 256n).toString() }));
  assert.throws(() => authorizationDigest(net, { ...auth(), nonce: '0x1234' }));
  assert.throws(() => authorizationDigest(net, { ...auth(), from: '0xnot-an-address' }));
});

test('a signature from viem signTypedData recovers its signer; another signer is refused', async () => {
  const net = custom;
  const payer = privateKeyToAccount(generatePrivateKey());
  const a = { ...auth(), from: payer.address };
  const signature = await payer.signTypedData({
    domain: { name: net.eip712.name, version: net.eip712.version, chainId: net.chainId, verifyingContract: net.asset as Hex },
    types,
    primaryType: 'TransferWithAuthorization',
    message: {
      ...a,
      to: getAddress(a.to),
      value: BigInt(a.value),
      validAfter: BigInt(a.validAfter),
      validBefore: BigInt(a.validBefore),
      nonce: a.nonce as Hex,
    },
  });
  const payload = (from: string) => ({ payload: { authorization: { ...a, from }, signature } }) as never;
  await checkSignature(payload(payer.address), net, new PayerKeys());
  const e = await checkSignature(payload(addr()), net, new PayerKeys()).catch((x) => x);
  assert.is(e?.code, 'payment_signature_invalid');
});

test.run();
