// The verification host's front page: verify.{domain}/ shows a person what the service is, its
// tiers and prices, how to pay with x402 and where /v1/info and /openapi.json are (a real
// headless Chromium screenshot and its visible text), and answers an agent the same facts as JSON.
// Screenshots go to a temporary directory, or to $ROOTBOX_SCREENSHOTS (kept) to look at them.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { dumpDom, visibleText } from './browser.js';
import { curl, shot } from './helpers.js';

const shots = process.env.ROOTBOX_SCREENSHOTS ?? mkdtempSync(join(tmpdir(), 'rbx-shots-'));
let d: TestDaemon;
let origin: string;

test.before(async () => {
  mkdirSync(shots, { recursive: true });
  d = await startTestDaemon({
    verify: { x402: { payTo: '0x' + '5a'.repeat(20), facilitatorUrl: 'http://127.0.0.1:9/' } }, // no facilitator: the terms only
  });
  origin = `http://verify.localhost:${d.http}`;
});
test.after(async () => {
  await d?.stop();
  if (!process.env.ROOTBOX_SCREENSHOTS) rmSync(shots, { recursive: true, force: true });
});

test('verify.{domain}/ shows a person the service, its tiers and prices, how to pay with x402 and the links for programs', async () => {
  await shot(shots, 'verify-home', `${origin}/`);
  const seen = visibleText(await dumpDom(`${origin}/`));
  assert.not.match(seen, 'no route');
  for (const s of ['Verification', 'independent AI verifier passes', 'How to pay with x402', 'PAYMENT-SIGNATURE', 'No account and no API key'])
    assert.match(seen, s);
  for (const [tier, price] of [
    ['quick', '$0.06'],
    ['standard', '$0.10'],
    ['deep', '$0.20'],
  ])
    assert.match(seen, new RegExp(`${tier}\\s+\\d+ passes\\s+\\${price}\\s+POST /v1/verify/${tier}`));
  assert.match(seen, `${origin}/v1/info`);
  assert.match(seen, `${origin}/openapi.json`);
});

test('verify.{domain}/ answers an agent the same facts as JSON, and the page for a browser', async () => {
  const agent = await curl(`${origin}/`);
  assert.is(agent.status, 200, agent.text);
  assert.is(agent.type, 'application/json; charset=utf-8');
  assert.equal(
    agent.json.tiers.map((t: { tier: string; price: string }) => `${t.tier} ${t.price}`),
    ['quick $0.06', 'standard $0.10', 'deep $0.20'],
  );
  assert.is(agent.json.payment.protocol, 'x402');
  assert.is(agent.json.links.info, `${origin}/v1/info`);
  assert.is(agent.json.links.openapi, `${origin}/openapi.json`);
  const info = await curl(agent.json.links.info);
  assert.equal(
    info.json.tiers.map((t: { tier: string; price: string }) => `${t.tier} ${t.price}`),
    agent.json.tiers.map((t: { tier: string; price: string }) => `${t.tier} ${t.price}`),
    'the page and the service card agree',
  );
  const page = await curl(`${origin}/`, { accept: 'text/html,application/xhtml+xml' });
  assert.is(page.status, 200);
  assert.match(page.type, 'text/html');
});

test.run();
