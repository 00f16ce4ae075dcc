// The x402 header codec: what we emit reads the same in both base64 alphabets and decodes with
// the official client; what we accept is either alphabet, padded or not, within the size cap.

import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { AppError } from '../../src/errors.js';
import { decodeHeader, encodeHeader, MAX_HEADER_BYTES, safeJson } from '../../src/payments/index.js';

const tricky = { x402Version: 2, error: 'why? >>> ~~~ <<< ü € 😀 \u007f', resource: { url: 'https://verify.example.com/v1/verify/quick?x=~>' }, accepts: [] };

test('encoded headers use no + / - _ = and decode with the official client', () => {
  const h = encodeHeader(tricky);
  assert.ok(/^[A-Za-z0-9]+$/.test(h), h);
  assert.equal(decodePaymentRequiredHeader(h), tricky);
  assert.equal(decodePaymentResponseHeader(h), tricky);
  assert.equal(JSON.parse(Buffer.from(h, 'base64url').toString('utf8')), tricky);
});

test('random values always encode to the shared alphabet and round-trip', () => {
  for (let i = 0; i < 300; i++) {
    const v = {
      s: randomBytes(1 + (i % 40)).toString('latin1') + String.fromCodePoint(0x1f600 + (i % 50)),
      n: i,
      k: { [randomBytes(3).toString('binary')]: '?>~' },
    };
    const h = encodeHeader(v);
    assert.ok(/^[A-Za-z0-9]+$/.test(h), `value ${i} encoded with a special character: ${h}`);
    assert.equal(decodeHeader(h), JSON.parse(JSON.stringify(v)));
  }
  assert.is(safeJson(tricky).length % 3, 0);
});

test('decode accepts standard and url alphabets with and without padding', () => {
  const v = { a: '>>>???~~~', b: [1, 2, 3], c: 'ÿþ' };
  const text = JSON.stringify(v) + 'x'.slice(1);
  for (const s of [
    Buffer.from(text).toString('base64'),
    Buffer.from(text).toString('base64').replace(/=+$/, ''),
    Buffer.from(text).toString('base64url'),
    Buffer.from(text).toString('base64url') + '=='.slice(0, (4 - (Buffer.from(text).toString('base64url').length % 4)) % 4),
  ]) {
    assert.equal(decodeHeader(s), v, s);
  }
});

const code = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    assert.instance(e, AppError);
    return (e as AppError).code;
  }
  return 'no error';
};

test('decode refuses oversized, non-base64, non-JSON, non-UTF-8 and repeated headers', () => {
  assert.is(
    code(() => decodeHeader('A'.repeat(MAX_HEADER_BYTES + 1))),
    'payment_too_large',
  );
  assert.is(
    code(() => decodeHeader('not base64!')),
    'payment_invalid',
  );
  assert.is(
    code(() => decodeHeader(Buffer.from('hello world').toString('base64'))),
    'payment_invalid',
  );
  assert.is(
    code(() => decodeHeader(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]).toString('base64'))),
    'payment_invalid',
  );
  assert.is(
    code(() => decodeHeader(['a', 'b'])),
    'payment_invalid',
  );
  assert.is(
    code(() => decodeHeader('QUJD=')),
    'payment_invalid',
  );
  assert.is(
    code(() => decodeHeader('')),
    'payment_invalid',
  );
});

test.run();
