import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PhoneVerifier } from '../../src/hosting/phone.js';
import { HostSecret } from '../../src/hosting/keys.js';
import { createLogger } from '../../src/log/index.js';
import { twilioSender, logSender } from '../../src/sms/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { startTwilio, type FakeTwilio } from '../helpers/twilio.js';

let dir: string;
let store: Store;
let twilio: FakeTwilio;
let now = Date.now();
let verifier: PhoneVerifier;
const logs: Record<string, unknown>[] = [];
const log = createLogger({ sink: (l) => logs.push(JSON.parse(l)) });

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rbx-phone-'));
  store = openStore(dir);
  twilio = await startTwilio();
  const sms = twilioSender(
    { provider: 'twilio', twilioBaseUrl: twilio.url, twilioAccountSid: twilio.sid, twilioAuthToken: twilio.token, twilioFrom: '+15005550006' },
    log,
    1000,
  );
  verifier = new PhoneVerifier(store, new HostSecret(dir), sms, () => now);
});
test.after(async () => {
  await twilio.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const err = async (p: Promise<unknown> | (() => unknown)) => {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    return e as { code: string; detail: string; headers?: Record<string, string> };
  }
  throw new Error('expected an error');
};

test('a code is texted through the Twilio Messages API and proves the number once', async () => {
  await verifier.sendCode('+14155550101', '192.0.2.1');
  const code = twilio.codeFor('+14155550101')!;
  assert.match(code, /^\d{6}$/);
  assert.match(twilio.messages[0].body, /STOP/);
  assert.is(twilio.messages[0].from, '+15005550006');
  await verifier.checkCode('+14155550101', code);
  assert.is((await err(() => verifier.checkCode('+14155550101', code))).code, 'code_not_pending', 'a code works once');
});

test('the code is stored only as a MAC, never in clear', async () => {
  now += 60_000;
  await verifier.sendCode('+14155550102', '192.0.2.2');
  const code = twilio.codeFor('+14155550102')!;
  const rec = store.codes.get('+14155550102')!;
  assert.not.ok(JSON.stringify(rec).includes(code));
  assert.is(rec.codeMac.length, 64);
});

test('five wrong codes lock the code: even the right one is refused afterwards', async () => {
  now += 60_000;
  await verifier.sendCode('+14155550103', '192.0.2.3');
  const code = twilio.codeFor('+14155550103')!;
  const wrong = code === '000000' ? '111111' : '000000';
  for (let i = 4; i >= 0; i--) {
    const e = await err(() => verifier.checkCode('+14155550103', wrong));
    assert.is(e.code, 'code_invalid');
    assert.match(e.detail, i > 0 ? new RegExp(`${i} attempt`) : /locked/);
  }
  assert.is((await err(() => verifier.checkCode('+14155550103', code))).code, 'code_locked');
});

test('an expired code is refused', async () => {
  now += 60_000;
  await verifier.sendCode('+14155550104', '192.0.2.4');
  const code = twilio.codeFor('+14155550104')!;
  now += 10 * 60_000 + 1;
  assert.is((await err(() => verifier.checkCode('+14155550104', code))).code, 'code_expired');
});

test('resends are limited per number (30 s gap, 5 an hour) and per IP (10 an hour) with Retry-After', async () => {
  now += 3_600_000;
  await verifier.sendCode('+14155550105', '192.0.2.5');
  const gap = await err(verifier.sendCode('+14155550105', '192.0.2.5'));
  assert.is(gap.code, 'sms_rate_limited');
  assert.ok(Number(gap.headers?.['retry-after']) > 0);
  for (let i = 0; i < 4; i++) {
    now += 31_000;
    await verifier.sendCode('+14155550105', '192.0.2.5');
  }
  now += 31_000;
  assert.match((await err(verifier.sendCode('+14155550105', '192.0.2.5'))).detail, /this number this hour/);
  for (let i = 0; i < 5; i++) await verifier.sendCode(`+1415555020${i}`, '192.0.2.5');
  assert.match((await err(verifier.sendCode('+14155550300', '192.0.2.5'))).detail, /from this address/);
});

test('concurrent requests for one number send one text: the slot is taken before the provider is awaited', async () => {
  now += 3_600_000;
  const phone = '+14155550600';
  const sent = () => twilio.messages.filter((m) => m.to === phone).length;
  const all = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => verifier.sendCode(phone, `203.0.113.${i + 1}`)));
  assert.is(sent(), 1, 'one text went out');
  assert.is(all.filter((r) => r.status === 'fulfilled').length, 1);
  for (const r of all) if (r.status === 'rejected') assert.is((r.reason as { code: string }).code, 'sms_rate_limited');
});

test('a send the provider refused gives its slot back: the next request for the number is sent at once', async () => {
  now += 3_600_000;
  const phone = '+14155550601';
  twilio.mode = 'server_error';
  assert.is((await err(verifier.sendCode(phone, '203.0.113.50'))).code, 'sms_failed');
  twilio.mode = 'ok';
  await verifier.sendCode(phone, '203.0.113.50');
  assert.ok(twilio.codeFor(phone), 'texted without waiting out the 30 s gap');
});

test('provider failures become clear errors and leave no pending code behind', async () => {
  now += 3_600_000;
  for (const [mode, code] of [
    ['server_error', 'sms_failed'],
    ['invalid_number', 'sms_rejected'],
    ['hang', 'sms_failed'],
  ] as const) {
    twilio.mode = mode;
    const phone = `+1415555040${mode.length}`;
    const e = await err(verifier.sendCode(phone, `198.51.100.${mode.length}`));
    assert.is(e.code, code, mode);
    assert.is(store.codes.get(phone), undefined, `${mode}: no code pending when it was not sent`);
  }
  twilio.mode = 'ok';
});

test('the log provider writes the text for the operator and never the auth token', async () => {
  await logSender(log).send('+14155550999', 'Your rootbox code is 123456.');
  const line = logs.find((l) => l.to === '+14155550999')!;
  assert.match(String(line.text), /123456/);
  assert.not.ok(JSON.stringify(logs).includes(twilio.token));
});

test.run();
