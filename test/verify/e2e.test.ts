// End to end with the official x402 client packages: @x402/fetch wrapFetchWithPayment and the
// @x402/evm exact scheme with a viem local account pay the daemon (402 → sign → retry) through
// the local facilitator, and read the report and the settlement header.

import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client, x402HTTPClient } from '@x402/fetch';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { hostFetch } from './fixtures/client.js';
import { PAY_TO, startWorld, type World } from './helpers.js';

let w: World;
test.before(async () => {
  w = await startWorld();
});
test.after(async () => {
  await w?.stop();
});

test('the official x402 client pays for a deep verification and reads the report', async () => {
  const account = privateKeyToAccount(generatePrivateKey());
  const client = registerExactEvmScheme(new x402Client(), { signer: account });
  const seen: Request[] = [];
  const pay = wrapFetchWithPayment(hostFetch(w.port, seen), client);
  w.llm.script = (c) => ({ verdict: c.model === 'm3' ? 'fail' : 'pass', reasoning: `Checked by ${c.model}; the sum is right.` });
  const res = await pay('http://verify.localhost/v1/verify/deep', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ artifact: '2 + 2 = 4', rubric: 'Is the arithmetic right?' }),
  });
  assert.is(res.status, 200, await res.clone().text());
  const report = await res.json();
  assert.is(report.tier, 'deep');
  assert.is(report.verdict, 'pass');
  assert.is(report.tally, '9/10');
  assert.match(report.dissent, 'm3');
  assert.is(seen.length, 2);
  assert.is(seen[0].headers.get('payment-signature'), null);
  assert.ok(seen[1].headers.get('payment-signature'));
  const settle = new x402HTTPClient(client).getPaymentSettleResponse((n) => res.headers.get(n));
  assert.is(settle.success, true);
  assert.is(settle.payer?.toLowerCase(), account.address.toLowerCase());
  assert.equal(decodePaymentResponseHeader(res.headers.get('x-payment-response')!), settle);
  const t = w.fac.transfers.at(-1)!;
  assert.equal([t.from, t.to.toLowerCase(), t.value], [account.address, PAY_TO, '200000']);
  assert.is(t.transaction, settle.transaction);
});

test('the official client paying twice signs two payments and is charged twice, once per call', async () => {
  const account = privateKeyToAccount(generatePrivateKey());
  const pay = wrapFetchWithPayment(hostFetch(w.port), registerExactEvmScheme(new x402Client(), { signer: account }));
  w.llm.script = () => ({ verdict: 'fail' });
  const before = w.fac.transfers.length;
  for (let i = 0; i < 2; i++) {
    const res = await pay('http://verify.localhost/v1/verify/quick', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ artifact: 'TODO' }),
    });
    assert.is(res.status, 200);
    assert.is((await res.json()).verdict, 'fail');
  }
  const mine = w.fac.transfers.slice(before);
  assert.is(mine.length, 2);
  assert.is.not(mine[0].nonce, mine[1].nonce);
});

test('the official client surfaces a 502 without being charged', async () => {
  const account = privateKeyToAccount(generatePrivateKey());
  const pay = wrapFetchWithPayment(hostFetch(w.port), registerExactEvmScheme(new x402Client(), { signer: account }));
  w.llm.script = () => ({ status: 500 });
  const before = w.fac.transfers.length;
  const res = await pay('http://verify.localhost/v1/verify/standard', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ artifact: 'x' }),
  });
  assert.is(res.status, 502);
  assert.is((await res.json()).error, 'llm_failed');
  assert.is(w.fac.transfers.length, before);
});

test('the official client pays over HTTPS (TLS with SNI verify.localhost) as well', async () => {
  const account = privateKeyToAccount(generatePrivateKey());
  const pay = wrapFetchWithPayment(hostFetch(w.daemon.https, undefined, w.daemon.ca), registerExactEvmScheme(new x402Client(), { signer: account }));
  w.llm.script = () => ({ verdict: 'pass' });
  const res = await pay(`https://verify.localhost:${w.daemon.https}/v1/verify/quick`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ artifact: 'hello' }),
  });
  assert.is(res.status, 200, await res.clone().text());
  assert.is((await res.json()).verdict, 'pass');
  assert.is(new x402HTTPClient(new x402Client()).getPaymentSettleResponse((n) => res.headers.get(n)).success, true);
});

test.run();
