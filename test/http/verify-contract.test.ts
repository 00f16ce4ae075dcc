// The verification API against its own /openapi.json: a real daemon with a local OpenAI-compatible
// server and a local x402 facilitator, driven through every declared route (and its CORS
// preflight) with good and bad input, paid and unpaid; an unconfigured API (no LLM, no payments)
// served by node:http gives the 503s. Every answer must be what the published document says.
import { Validator } from '@seriousme/openapi-schema-validator';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createLogger } from '../../src/log/index.js';
import { decodeHeader } from '../../src/payments/index.js';
import { createVerifyApi } from '../../src/verify/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { LocalFacilitator } from '../payments/fixtures/facilitator.js';
import { encode, newPayer, signPayment, type Terms } from '../payments/fixtures/payer.js';
import { LocalLlm } from '../verify/fixtures/llm.js';
import { Contract, send, type Answer, type SendOptions } from './contract.js';

const HOST = 'verify.localhost';
let d: TestDaemon;
let llm: LocalLlm;
let fac: LocalFacilitator;
let bare: Server;
let c: Contract;
let cBare: Contract;

const port = (s: Server) => (s.address() as AddressInfo).port;

test.before(async () => {
  llm = await new LocalLlm().start();
  fac = await new LocalFacilitator().start();
  d = await startTestDaemon({
    verify: {
      llm: { baseUrl: llm.url, models: ['m0', 'm1', 'm2', 'm3'], passTimeout: '1500ms' },
      x402: { payTo: '0x' + '3c'.repeat(20), facilitatorUrl: fac.url, facilitatorTimeout: '1s', settleTimeout: '1s' },
    },
  });
  const api = createVerifyApi({ log: createLogger({ level: 'error' }), serviceName: 'bare-verify' });
  bare = createServer((req, res) => void api.handle(req, res, { host: HOST, scheme: 'http', requestId: 'req-bare-0001', ip: '127.0.0.1' }));
  await new Promise<void>((r) => bare.listen(0, '127.0.0.1', r));
  c = new Contract((await send(d.http, HOST, 'GET', '/openapi.json')).json, 'verify');
  cBare = new Contract((await send(port(bare), HOST, 'GET', '/openapi.json')).json, 'bare');
});
test.after(async () => {
  await d?.stop();
  await new Promise((r) => bare?.close(r));
  await llm?.stop();
  await fac?.stop();
});

const expect = async (status: number, method: string, path: string, o: SendOptions = {}, on: 'daemon' | 'bare' = 'daemon'): Promise<Answer> => {
  const a = await send(on === 'daemon' ? d.http : port(bare), HOST, method, path, o);
  (on === 'daemon' ? c : cBare).check(method, path, a);
  assert.is(a.status, status, `${method} ${path}: ${a.text.slice(0, 300)}`);
  return a;
};
/** Terms from an unpaid call, signed. */
const payment = async (tier: string): Promise<string> => {
  const unpaid = await expect(402, 'POST', `/v1/verify/${tier}`, { body: { artifact: 'terms' } });
  return encode(await signPayment(newPayer(), (decodeHeader(unpaid.headers['payment-required'], 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0]));
};

test('both documents are valid OpenAPI 3.1 with no ±2^53 stand-in integer bounds, the x402 manifest neither', async () => {
  for (const doc of [c.doc, cBare.doc]) {
    const r = await new Validator().validate(doc);
    assert.ok(r.valid, JSON.stringify(r.errors));
    assert.not.match(JSON.stringify(doc), /900719925474099[01]/);
  }
  assert.not.match((await expect(200, 'GET', '/.well-known/x402')).text, /900719925474099[01]/);
});

test('the free routes and every CORS preflight answer as documented', async () => {
  for (const path of ['/', '/healthz', '/openapi.json', '/v1/info', '/.well-known/x402', '/v1/stats']) await expect(200, 'GET', path);
  for (const path of ['/', '/healthz', '/openapi.json', '/v1/info', '/.well-known/x402', '/v1/stats', '/v1/verify/quick']) await expect(204, 'OPTIONS', path);
});

test('POST /v1/verify/{tier} answers 404, 400, 413, 415 and 402 before any pass runs', async () => {
  const before = llm.calls.length;
  await expect(404, 'POST', '/v1/verify/ultra', { body: 'not json' });
  for (const body of [{}, { artifact: '' }, { artifact: '   ' }, { artifact: 5 }, { artifact: 'a', rubric: 'r'.repeat(10_001) }, '{"artifact":'])
    assert.ok((await expect(400, 'POST', '/v1/verify/quick', { body })).json.error);
  await expect(400, 'POST', '/v1/verify/quick');
  await expect(413, 'POST', '/v1/verify/quick', { body: { artifact: 'x'.repeat(1024 * 1024 + 1) } });
  await expect(415, 'POST', '/v1/verify/quick', { body: 'artifact=x', headers: { 'content-type': 'text/plain' } });
  const unpaid = await expect(402, 'POST', '/v1/verify/deep', { body: { artifact: 'a' } });
  assert.ok(unpaid.json.accepts.length);
  for (const p of ['!!!', 'A'.repeat(9000)]) await expect(402, 'POST', '/v1/verify/quick', { body: { artifact: 'a' }, headers: { 'x-payment': p } });
  assert.is(llm.calls.length, before);
});

test('a paid call answers the report with PAYMENT-RESPONSE; provider or facilitator failures answer 502', async () => {
  const ok = await expect(200, 'POST', '/v1/verify/quick', { body: { artifact: 'hello' }, headers: { 'x-payment': await payment('quick') } });
  assert.is(ok.json.passes_completed, 3);
  llm.script = () => ({ status: 500 });
  await expect(502, 'POST', '/v1/verify/quick', { body: { artifact: 'hello' }, headers: { 'x-payment': await payment('quick') } });
  llm.script = () => ({ verdict: 'pass' });
  fac.verifyMode = 'error500';
  await expect(502, 'POST', '/v1/verify/quick', { body: { artifact: 'hello' }, headers: { 'x-payment': await payment('quick') } });
  fac.verifyMode = 'ok';
});

test('every path answers a method it does not declare with 405 and Allow', async () => {
  for (const path of Object.keys(c.doc.paths)) assert.ok((await expect(405, 'DELETE', path.replace('{tier}', 'quick'))).headers.allow, path);
});

test('without LLM and payments the API answers 503 on info, manifest and the paid route (after 404 and 400)', async () => {
  await expect(503, 'GET', '/v1/info', {}, 'bare');
  await expect(503, 'GET', '/.well-known/x402', {}, 'bare');
  await expect(404, 'POST', '/v1/verify/nope', { body: {} }, 'bare');
  await expect(400, 'POST', '/v1/verify/quick', { body: {} }, 'bare');
  const r = await expect(503, 'POST', '/v1/verify/quick', { body: { artifact: 'a' } }, 'bare');
  assert.is(r.json.request_id, 'req-bare-0001');
});

test('every declared route was exercised', () => {
  const { missing, unseen } = c.coverage();
  console.log(`documented statuses not reached here: ${unseen.join('; ')}`);
  assert.equal(missing, []);
});

test.run();
