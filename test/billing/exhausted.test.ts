// An account that used up its free grant and has no credit, against a real daemon (fast tier:
// its servers are processes, see scripts/test.mjs): POST /create answers 402 with the upgrade envelope and makes nothing (before, it
// made a server that was paused 48 h later); read endpoints answer the envelope with what they
// would have answered beside it, so `suspended: true` of a suspended server is visible. Time is
// moved by calling the daemon's billing pass with a chosen clock; SMS goes to a local Twilio.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startTwilio, type FakeTwilio } from '../helpers/twilio.js';
import { call, type Answer } from './api.js';

/** The daemon's clock for its SMS time windows: moved by the tests instead of waiting. */
let smsSkew = 0;
const smsNow = () => Date.now() + smsSkew;

const HOUR = 3_600_000;
let d: TestDaemon;
let twilio: FakeTwilio;
let clock = Date.now() + HOUR;
const phone = '+15005550123';
/** A verified account made at the start (its SMS code was sent then). */
const phoneSignup = { key: '' };
/** Two billing passes `hours` apart, later than any before: enough to use up a tiny grant. */
const passHours = async (hours: number) => {
  await d.daemon.billing.tick((clock += HOUR));
  await d.daemon.billing.tick((clock += hours * HOUR));
};

test.before(async () => {
  twilio = await startTwilio();
  d = await startTestDaemon(
    {
      publicIp: '127.0.0.1',
      billing: { grantRamGbHours: 0.001, verifiedGrantRamGbHours: 0.001, grantEgressGb: 1, meterInterval: '1h' },
      hosting: {
        rateLimit: { createsPerIpPerHour: 1000 },
        sms: { provider: 'twilio', twilioBaseUrl: twilio.url, twilioAccountSid: twilio.sid, twilioAuthToken: twilio.token, twilioFrom: '+15005550006' },
      },
    },
    {},
    smsNow,
  );
  const step1 = await call(d.http, 'POST', '/create', { body: { phone } });
  assert.is(step1.body.verification_required, true, JSON.stringify(step1.body));
  const signup = await call(d.http, 'POST', '/create', { body: { phone, code: twilio.codeFor(phone) } });
  assert.is(signup.status, 200, JSON.stringify(signup.body));
  phoneSignup.key = signup.body.api_key;
});
test.after(async () => {
  await d?.stop();
  await twilio?.close();
});

/** The envelope; its message says what is true now: paused in 48h, or paused already. */
const isEnvelope = (r: Answer, message = /paused in 48h unless you add credit/) => {
  assert.is(r.status, 402, JSON.stringify(r.body));
  assert.is(r.body.error, 'free_tier_exceeded');
  assert.is(r.body.upgrade_required, true);
  assert.is(r.body.reason, 'free_tier_exceeded');
  assert.is(r.body.upgrade_url, 'http://api.localhost/account/recharge');
  assert.match(r.body.message, message);
};
const PAUSED = /servers are paused; add credit/;
const counts = () => ({
  servers: d.daemon.store.servers.all().length,
  containers: d.daemon.runtime.list().length,
  accounts: d.daemon.store.accounts.all().length,
});

let key: string;
let id: string;

test('POST /create on an account whose grant is used up and that has no credit answers 402 with the upgrade envelope and makes nothing', async () => {
  const created = await call(d.http, 'POST', '/create');
  assert.is(created.status, 200, JSON.stringify(created.body));
  ({ api_key: key, id } = created.body);
  assert.is((await call(d.http, 'POST', '/create', { key })).status, 200, 'a second server while the grant lasts');
  await passHours(2);
  isEnvelope(await call(d.http, 'GET', '/credits', { key }));

  const before = counts();
  isEnvelope(await call(d.http, 'POST', '/create', { key }));
  isEnvelope(await call(d.http, 'POST', '/create', { key, body: { subdomains: ['exhausted-try'] } }));
  assert.equal(counts(), before, 'no server, container or account made');
  assert.is(d.daemon.store.servers.bySlug('exhausted-try'), undefined);
});

test('during the grace GET /servers/{id} answers the envelope with the server; once suspended it shows suspended: true', async () => {
  const grace = await call(d.http, 'GET', `/servers/${id}`, { key });
  isEnvelope(grace);
  assert.is(grace.body.suspended, false);
  assert.is(grace.body.server.id, id);
  assert.is(grace.body.server.state, 'running');

  await d.daemon.billing.tick((clock += 49 * HOUR));
  assert.is(d.daemon.store.servers.get(id)?.suspended, true);
  const one = await call(d.http, 'GET', `/servers/${id}`, { key });
  isEnvelope(one, PAUSED);
  assert.is(one.body.suspended, true);
  assert.is(one.body.server.suspended, true);
  assert.is.not(one.body.server.state, 'running');
  const all = await call(d.http, 'GET', '/servers', { key });
  isEnvelope(all, PAUSED);
  assert.ok(all.body.servers.length === 2 && all.body.servers.every((s: { suspended: boolean }) => s.suspended));
  const credits = await call(d.http, 'GET', '/credits', { key });
  isEnvelope(credits, PAUSED);
  assert.ok(credits.body.credits.balance_usd <= 0, 'no credit');
  const missing = await call(d.http, 'GET', '/servers/srv_0123456789ab', { key });
  assert.is(missing.status, 404, 'another id is still 404, not the envelope');
});

test('credit lifts it: the server is back and POST /create makes servers again', async () => {
  assert.ok(await d.daemon.billing.credit(d.daemon.store.servers.get(id)!.accountId, 1, 'test:exhausted'));
  const one = await call(d.http, 'GET', `/servers/${id}`, { key });
  assert.is(one.status, 200, JSON.stringify(one.body));
  assert.is(one.body.suspended, false);
  assert.is(one.body.state, 'running');
  assert.is((await call(d.http, 'POST', '/create', { key })).status, 200);
});

test('a phone login into an exhausted account answers 402 with the envelope and its api_key, and makes no server', async () => {
  // one code per number per 30 s: the sign-up's code went out in test.before
  smsSkew += 31_000; // past the 30 s gap between codes to one number: the daemon's clock moves, nobody waits
  await passHours(2);
  const before = counts();
  const again = await call(d.http, 'POST', '/create', { body: { phone } });
  assert.is(again.body.verification_required, true, JSON.stringify(again.body));
  const login = await call(d.http, 'POST', '/create', { body: { phone, code: twilio.codeFor(phone) } });
  isEnvelope(login, PAUSED); // its servers were paused with the others, 49 h after its grant ran out
  assert.not.match(login.body.message, /verify a phone/, 'a verified account is not told to verify a phone');
  assert.is(login.body.api_key, phoneSignup.key, "the account's key, so it can add credit");
  assert.match(login.body.account_note, /logged into the existing account/);
  assert.equal(counts(), before);
});

test.run();
