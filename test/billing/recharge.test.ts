// Billing end to end with real containers: grant used up → upgrade envelope → 48 h later the
// server is suspended (stopped, subdomain 402) → an x402 recharge credits the balance once,
// raises the ceilings live and brings the server back. Time is moved by calling the daemon's
// billing pass with a chosen clock; payments go through a local x402 facilitator.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { decodeHeader } from '../../src/payments/index.js';
import { call as callApi } from './api.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { LocalFacilitator } from '../payments/fixtures/facilitator.js';
import { encode, newPayer, signPayment, type Terms } from '../payments/fixtures/payer.js';

const PAY_TO = '0x1111111111111111111111111111111111111111';
const HOUR = 3_600_000;
let d: TestDaemon;
let fac: LocalFacilitator;

test.before(async () => {
  fac = await new LocalFacilitator().start();
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    verify: { x402: { payTo: PAY_TO, facilitatorUrl: fac.url, facilitatorTimeout: '1s', settleTimeout: '1s' } },
    billing: { grantRamGbHours: 0.001, grantEgressGb: 1, meterInterval: '1h' },
  });
});
test.after(async () => {
  await d?.stop();
  await fac?.stop();
});

const call = (method: string, path: string, opts: Parameters<typeof callApi>[3] = {}) => callApi(d.http, method, path, opts);

test('grant used up → envelope → suspension after 48 h → recharge once → ceilings raised and server back', async () => {
  const created = await call('POST', '/create');
  assert.is(created.status, 200, JSON.stringify(created.body));
  const { api_key: key, id, subdomain } = created.body;
  const billing = d.daemon.billing;
  const t0 = Date.now() + HOUR;
  await billing.tick(t0);
  await billing.tick(t0 + 2 * HOUR);
  const env = await call('GET', '/servers', { key });
  assert.is(env.status, 402);
  assert.is(env.body.upgrade_required, true);
  assert.is(env.body.reason, 'free_tier_exceeded');
  assert.is(env.body.upgrade_url, 'http://api.localhost/account/recharge');
  assert.match(env.body.message, /48h/);
  await billing.tick(t0 + 20 * HOUR);
  assert.is(d.daemon.runtime.get(id)?.state, 'running', 'not suspended before 48 h');
  await billing.tick(t0 + 2 * HOUR + 48 * HOUR);
  assert.is(d.daemon.store.servers.get(id)?.suspended, true);
  assert.is.not(d.daemon.runtime.get(id)?.state, 'running', 'suspended servers are stopped');
  const site = await call('GET', '/', { host: subdomain });
  assert.is(site.status, 402);

  const info = await call('GET', '/account/recharge', { key });
  assert.is(info.status, 200);
  assert.match(info.body.how, /X-PAYMENT/);
  const html = await call('GET', '/account/recharge', { key, headers: { accept: 'text/html' } });
  assert.match(String(html.body), /<h1>Add credit<\/h1>/);

  const unpaid = await call('POST', '/account/recharge', { key, body: { usd: 2 } });
  assert.is(unpaid.status, 402);
  const terms = (decodeHeader(unpaid.headers['payment-required'] as string, 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0];
  assert.is(terms.amount, '2000000', 'exactly the asked amount in atomic units');
  const payment = encode(await signPayment(newPayer(), terms));
  const paid = await call('POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': payment } });
  assert.is(paid.status, 200, JSON.stringify(paid.body));
  assert.is(paid.body.credited_usd, 2);
  assert.is(paid.body.credits.tier, 'paid');
  assert.ok(paid.headers['payment-response']);
  const replay = await call('POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': payment } });
  assert.is(replay.status, 402);
  assert.is(replay.body.error, 'payment_already_used');
  assert.is(fac.transfers.length, 1, 'settled once');

  assert.is(d.daemon.store.servers.get(id)?.suspended, false);
  assert.is(d.daemon.runtime.get(id)?.state, 'running', 'the server is back');
  const limit = Number(readFileSync(`/sys/fs/cgroup/memory/${d.cfg.runtime.nftTable}/${id}/memory.limit_in_bytes`, 'utf8').trim());
  assert.is(limit, 4 * 1024 ** 3, 'the paid RAM ceiling is applied live');
  const credits = await call('GET', '/credits', { key });
  assert.is(credits.status, 200);
  assert.ok(credits.body.balance_usd > 1.9 && credits.body.balance_usd <= 2);
});

test('a recharge with a malformed amount is refused before any payment', async () => {
  const created = await call('POST', '/create');
  for (const usd of [0, -1, 'five', 1e9, 0.0000001]) {
    const r = await call('POST', '/account/recharge', { key: created.body.api_key, body: { usd } });
    assert.is(r.status, 400, `${usd}: ${JSON.stringify(r.body)}`);
  }
});

test.run();
