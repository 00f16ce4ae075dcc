// Facilitator authentication and the /supported check, against a local authenticated facilitator
// (fixtures/cdpgate.ts) in front of the local x402 facilitator: a fresh CDP JWT per request
// (ES256 from a PEM key, EdDSA from a base64 Ed25519 key) with the request's method and path;
// a wrong key, a facilitator that does not list our network → 503 payments_unavailable before
// any work, said in /v1/info and the log; fixed headers; secrets never in the log.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { cdpJwt, cdpSigningKey, paymentChecks } from '../../src/payments/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { CdpGate } from './fixtures/cdpgate.js';
import { LocalFacilitator } from './fixtures/facilitator.js';
import { call } from '../verify/fixtures/client.js';
import { LocalLlm } from '../verify/fixtures/llm.js';
import { MODELS, PAY_TO, payFor, verify } from '../verify/helpers.js';

const KEY_ID = 'organizations/0000-test/apiKeys/1111-test';
const ec = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
const ecPem = ec.privateKey.export({ type: 'sec1', format: 'pem' }).toString();
const ed = generateKeyPairSync('ed25519');
const edJwk = ed.privateKey.export({ format: 'jwk' });
const edSecret = Buffer.concat([Buffer.from(edJwk.d!, 'base64url'), Buffer.from(edJwk.x!, 'base64url')]).toString('base64');

let llm: LocalLlm;
let fac: LocalFacilitator;
const open: { stop(): Promise<void> }[] = [];

test.before(async () => {
  llm = await new LocalLlm().start();
  fac = await new LocalFacilitator().start();
});
test.after(async () => {
  for (const o of open.reverse()) await o.stop().catch(() => undefined);
  await llm?.stop();
  await fac?.stop();
});

async function gate(auth: ConstructorParameters<typeof CdpGate>[1]): Promise<CdpGate> {
  const g = await new CdpGate(fac, auth).start();
  open.push(g);
  return g;
}

async function daemon(x402: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Promise<TestDaemon> {
  const d = await startTestDaemon(
    {
      verify: {
        llm: { baseUrl: llm.url, models: MODELS, passTimeout: '1500ms' },
        x402: { payTo: PAY_TO, facilitatorTimeout: '1s', settleTimeout: '1s', ...x402 },
      },
    },
    env,
  );
  open.push(d);
  return d;
}

const req = (method: string, url: string, token: string) =>
  ({ method, url, headers: { host: '127.0.0.1:1', authorization: `Bearer ${token}` } }) as unknown as IncomingMessage;

test('a CDP-authenticated facilitator gets a fresh ES256 JWT for each request and a paid verification settles', async () => {
  const g = await gate({ keyId: KEY_ID, publicKey: ec.publicKey });
  const d = await daemon({ facilitatorUrl: g.url, facilitatorAuth: 'cdp' }, { ROOTBOX_CDP_KEY_ID: KEY_ID, ROOTBOX_CDP_KEY_SECRET: ecPem });
  llm.script = () => ({ verdict: 'pass' });
  const r = await verify(d.http, 'quick', { artifact: 'hello' }, await payFor(d.http, 'quick'));
  assert.is(r.status, 200, r.text);
  const calls = g.seen.map((s) => `${s.method} ${s.path.replace('/platform/v2/x402', '')}`);
  assert.equal(calls, ['GET /supported', 'POST /verify', 'POST /settle']);
  assert.ok(
    g.seen.every((s) => s.ok),
    JSON.stringify(g.seen.map((s) => s.why)),
  );
  assert.is(new Set(g.seen.map((s) => s.authorization)).size, 3, 'one token per request');
  assert.is(new Set(g.seen.map((s) => s.nonce)).size, 3, 'a nonce of its own in each');
  const info = await call(d.http, 'GET', '/v1/info');
  assert.is(info.json.payment.available, true);
  assert.equal(info.json.payment.problems, []);
  const logs = JSON.stringify(d.logs);
  assert.not.ok(logs.includes(ecPem.split('\n')[1]), 'the key never reaches the log');
  assert.not.ok(logs.includes('Bearer'), 'no token in the log');
});

test('a key the facilitator does not know: /supported is refused, the paid route answers 503 payments_unavailable before any work', async () => {
  const g = await gate({ keyId: KEY_ID, publicKey: ec.publicKey });
  const other = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey.export({ type: 'sec1', format: 'pem' }).toString();
  const d = await daemon({ facilitatorUrl: g.url, facilitatorAuth: 'cdp', cdpKeyId: KEY_ID, cdpKeySecret: other });
  assert.ok(g.seen.length >= 1 && g.seen.every((s) => !s.ok && /signature/.test(s.why ?? '')));
  const before = llm.calls.length;
  const unpaid = await verify(d.http, 'quick', { artifact: 'hello' });
  assert.is(unpaid.status, 503);
  assert.is(unpaid.json.error, 'payments_unavailable');
  assert.match(unpaid.json.detail, /refused our credentials \(401\)/);
  const info = await call(d.http, 'GET', '/v1/info');
  assert.is(info.json.payment.available, false);
  assert.match(info.json.payment.problems[0], /credentials/);
  assert.is(llm.calls.length, before, 'no pass ran');
  assert.ok(d.logs.some((l) => l.level === 'warn' && String(l.msg).includes('payments unavailable')));
  const [row] = await paymentChecks(d.cfg.verify.x402);
  assert.is(row.ok, false);
  assert.match(row.detail, /auth cdp.*refused our credentials \(401\)/);
});

test('a facilitator whose /supported lacks our network → 503 payments_unavailable; once it lists it, fixed headers pay', async () => {
  const g = await gate({ header: 'x-api-key', value: 'fixed-secret-value' });
  g.networks = ['eip155:84532'];
  const d = await daemon({ facilitatorUrl: g.url, facilitatorAuth: 'headers', facilitatorHeaders: { 'X-Api-Key': 'fixed-secret-value' } });
  const r = await verify(d.http, 'standard', { artifact: 'x' }, 'eyJ4NDAyVmVyc2lvbiI6Mn0');
  assert.is(r.status, 503);
  assert.is(r.json.error, 'payments_unavailable');
  assert.match(r.json.detail, /does not support x402 v2 exact on eip155:8453 \(it lists exact\/eip155:84532\)/);
  const info = await call(d.http, 'GET', '/v1/info');
  assert.is(info.json.payment.available, false);
  assert.ok(d.logs.some((l) => l.level === 'warn' && JSON.stringify(l).includes('does not support')));
  g.networks = ['eip155:8453'];
  await d.daemon.payments.health.check();
  assert.is((await call(d.http, 'GET', '/v1/info')).json.payment.available, true);
  llm.script = () => ({ verdict: 'fail' });
  const paid = await verify(d.http, 'quick', { artifact: 'TODO' }, await payFor(d.http, 'quick'));
  assert.is(paid.status, 200, paid.text);
  assert.ok(g.seen.every((s) => s.ok));
  assert.not.ok(JSON.stringify(d.logs).includes('fixed-secret-value'));
});

test('the JWT: Ed25519 keys sign EdDSA; an expired token, another path, another method or another key are refused', async () => {
  const g = new CdpGate(fac, { keyId: KEY_ID, publicKey: ed.publicKey as KeyObject });
  const key = cdpSigningKey(edSecret);
  assert.is(key.alg, 'EdDSA');
  const url = 'http://127.0.0.1:1/platform/v2/x402/settle';
  assert.is((await g.check(req('POST', '/platform/v2/x402/settle', await cdpJwt(KEY_ID, key, 'POST', url)))).why, null);
  const old = Math.floor(Date.now() / 1000) - 600;
  assert.match((await g.check(req('POST', '/platform/v2/x402/settle', await cdpJwt(KEY_ID, key, 'POST', url, old)))).why!, /exp/);
  assert.match((await g.check(req('POST', '/platform/v2/x402/verify', await cdpJwt(KEY_ID, key, 'POST', url)))).why!, /uris/);
  assert.match((await g.check(req('GET', '/platform/v2/x402/settle', await cdpJwt(KEY_ID, key, 'POST', url)))).why!, /uris/);
  const stranger = cdpSigningKey(ecPem);
  assert.is(stranger.alg, 'ES256');
  assert.match((await g.check(req('POST', '/platform/v2/x402/settle', await cdpJwt(KEY_ID, stranger, 'POST', url)))).why!, /signature|alg/);
  assert.throws(() => cdpSigningKey('not a key'), /neither an EC key/);
});

test.run();
