// The verification API over real HTTP against a real daemon: order of checks, 402 terms, the
// free endpoints (OpenAPI validated), stats kept across restarts, and 503 when unconfigured.

import { Validator } from '@seriousme/openapi-schema-validator';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon } from '../helpers/daemon.js';
import { call } from './fixtures/client.js';
import { PAY_TO, payFor, startWorld, verify, type World } from './helpers.js';

const dataDir = mkdtempSync(join(tmpdir(), 'rbx-verify-api-'));
let w: World;

test.before(async () => {
  w = await startWorld({ dataDir });
});
test.after(async () => {
  await w?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

test('an unknown tier is 404 before the body or payment is looked at', async () => {
  const r = await call(w.port, 'POST', '/v1/verify/ultra', { body: 'not json', headers: { 'x-payment': 'garbage' } });
  assert.is(r.status, 404);
  assert.is(r.json.error, 'unknown_tier');
  assert.type(r.json.detail, 'string');
});

test('bad bodies are 400 before payment: missing, empty, blank or long artifact, long rubric, bad JSON', async () => {
  const bodies: (object | string)[] = [
    {},
    { artifact: '' },
    { artifact: '   ' },
    { artifact: 'x'.repeat(100_001) },
    { artifact: 'ok', rubric: 'r'.repeat(10_001) },
    '{"artifact":',
    { artifact: 5 },
  ];
  for (const b of bodies) {
    const r = await verify(w.port, 'quick', b);
    assert.is(r.status, 400, JSON.stringify(b).slice(0, 80));
    assert.type(r.json.error, 'string');
    assert.type(r.json.detail, 'string');
  }
  const empty = await call(w.port, 'POST', '/v1/verify/quick');
  assert.is(empty.status, 400);
  assert.is((await verify(w.port, 'quick', { artifact: 'x'.repeat(100_000), rubric: 'r'.repeat(10_000) })).status, 402);
});

test('an unpaid call is 402 with x402 v2 terms in PAYMENT-REQUIRED, no-store and CORS exposure', async () => {
  const before = w.llm.calls.length;
  const r = await verify(w.port, 'deep', { artifact: 'hello' });
  assert.is(r.status, 402);
  assert.is(r.json.error, 'payment_required');
  assert.is(r.headers['cache-control'], 'no-store');
  assert.match(r.headers['access-control-expose-headers'], 'PAYMENT-REQUIRED');
  assert.match(r.headers['access-control-expose-headers'], 'PAYMENT-RESPONSE');
  assert.ok(/^[A-Za-z0-9]+$/.test(r.headers['payment-required']));
  const terms = decodePaymentRequiredHeader(r.headers['payment-required']);
  assert.is(terms.x402Version, 2);
  assert.type(terms.error, 'string');
  assert.equal(terms.resource, {
    url: 'http://verify.localhost/v1/verify/deep',
    description: 'deep verification: 10 independent verifier passes',
    mimeType: 'application/json',
  });
  assert.equal(terms.accepts, [
    {
      scheme: 'exact',
      network: 'eip155:8453',
      amount: '200000',
      asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      payTo: PAY_TO,
      maxTimeoutSeconds: 300,
      extra: { name: 'USD Coin', version: '2' },
    },
  ]);
  assert.equal(r.json.accepts, terms.accepts);
  for (const [tier, amount] of [
    ['quick', '60000'],
    ['standard', '100000'],
  ]) {
    const t = decodePaymentRequiredHeader((await verify(w.port, tier, { artifact: 'a' })).headers['payment-required']);
    assert.is(t.accepts[0].amount, amount);
  }
  assert.is(w.llm.calls.length, before);
});

test('a CORS preflight is answered', async () => {
  const r = await call(w.port, 'OPTIONS', '/v1/verify/quick');
  assert.is(r.status, 204);
  assert.match(r.headers['access-control-allow-headers'], 'x-payment');
  assert.is(r.headers['access-control-allow-origin'], '*');
});

test('oversized and malformed payment headers get 402 without running passes', async () => {
  const before = w.llm.calls.length;
  const big = await verify(w.port, 'quick', { artifact: 'a' }, 'A'.repeat(9000));
  assert.is(big.status, 402);
  assert.is(big.json.error, 'payment_too_large');
  assert.ok(big.headers['payment-required']);
  const bad = await verify(w.port, 'quick', { artifact: 'a' }, '!!!');
  assert.is(bad.status, 402);
  assert.is(bad.json.error, 'payment_invalid');
  const wrong = await verify(w.port, 'deep', { artifact: 'a' }, await payFor(w.port, 'quick'));
  assert.is(wrong.status, 402);
  assert.is(wrong.json.error, 'payment_wrong_amount');
  assert.is(w.llm.calls.length, before);
});

test('healthz, info and the x402 manifest describe the service', async () => {
  const h = await call(w.port, 'GET', '/healthz');
  assert.equal(h.json, { ok: true, service: 'rootbox-verify' });
  const info = (await call(w.port, 'GET', '/v1/info')).json;
  assert.equal(
    info.tiers.map((t: any) => [t.tier, t.passes, t.price]),
    [
      ['quick', 3, '$0.06'],
      ['standard', 5, '$0.10'],
      ['deep', 10, '$0.20'],
    ],
  );
  assert.equal(info.not_configured, []);
  assert.is(info.payment.payTo, PAY_TO);
  assert.match(info.request.default_rubric, 'internally consistent');
  const m = (await call(w.port, 'GET', '/.well-known/x402')).json;
  assert.is(m.x402Version, 2);
  assert.is(m.resources.length, 3);
  const deep = m.resources.find((r: any) => r.resource.endsWith('/v1/verify/deep'));
  assert.is(deep.method, 'POST');
  assert.is(deep.accepts[0].amount, '200000');
  assert.equal(deep.input.bodySchema.required, ['artifact']);
  assert.ok(deep.output.properties.verdict);
});

test('openapi.json is a valid OpenAPI 3.1.0 document generated from the handler schemas', async () => {
  const doc = (await call(w.port, 'GET', '/openapi.json')).json;
  assert.is(doc.openapi, '3.1.0');
  assert.is(doc.info.version, '1.0.0');
  const res = await new Validator().validate(doc);
  assert.ok(res.valid, String(JSON.stringify(res.errors)).slice(0, 1000));
  const s = doc.components.schemas;
  assert.is(s.VerifyRequest.properties.artifact.maxLength, 100_000);
  assert.is(s.VerifyRequest.properties.rubric.maxLength, 10_000);
  assert.equal(s.VerifyReport.properties.passes.items, { $ref: '#/components/schemas/VerifierPass' });
  assert.equal(Object.keys(doc.paths).sort(), ['/', '/.well-known/x402', '/healthz', '/openapi.json', '/v1/info', '/v1/stats', '/v1/verify/{tier}']);
  assert.ok(doc.paths['/v1/verify/{tier}'].post.responses['402']);
});

test('stats count requests by route and status, unpaid 402s, and survive a restart', async () => {
  const s = (await call(w.port, 'GET', '/v1/stats')).json;
  assert.ok(s.requests['POST /v1/verify/:tier']['402'] >= 4);
  assert.ok(s.requests['POST /v1/verify/:tier']['404'] >= 1);
  assert.ok(s.requests['POST /v1/verify/:tier']['400'] >= 8);
  assert.ok(s.unpaid_402 >= 4);
  assert.is(s.paid_hits, 0);
  const unpaid = s.unpaid_402;
  await w.stop();
  w = await startWorld({ dataDir });
  const after = (await call(w.port, 'GET', '/v1/stats')).json;
  assert.is(after.unpaid_402, unpaid);
  assert.ok(after.requests['GET /v1/stats']['200'] >= 1);
});

test('without an LLM or payTo the paid route answers 503 not_configured after the 404 and 400 checks', async () => {
  const d = await startTestDaemon({});
  try {
    assert.is((await call(d.http, 'POST', '/v1/verify/nope', { body: {} })).status, 404);
    assert.is((await call(d.http, 'POST', '/v1/verify/quick', { body: {} })).status, 400);
    const r = await call(d.http, 'POST', '/v1/verify/quick', { body: { artifact: 'a' } });
    assert.is(r.status, 503);
    assert.is(r.json.error, 'not_configured');
    assert.match(r.json.detail, 'verify.llm.baseUrl');
    assert.match(r.json.detail, 'verify.x402.payTo');
    const info = (await call(d.http, 'GET', '/v1/info')).json;
    assert.equal(info.not_configured, ['verify.llm.baseUrl', 'verify.llm.models', 'verify.x402.payTo']);
    assert.is(info.payment.payTo, null);
    assert.is((await call(d.http, 'GET', '/healthz')).status, 200);
  } finally {
    await d.stop();
  }
});

test.run();
