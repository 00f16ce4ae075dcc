// Accounts shared by two daemons through a real PostgreSQL registry: an account made on host A
// works with its key on host B; a phone verified on A logs in on B with a code A texted (the
// cluster secret MACs codes and seals keys alike on every host) and gets back the same api_key; a
// key rotated on A is refused on B; the SMS resend limit counts sends of every host (concurrent
// requests on both hosts send one text); with the
// registry stopped a phone login answers 503 registry_unavailable while a key B has cached keeps
// working for B's servers, and the login works again once the registry is back.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // accounts need no container
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryPool } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { startTwilio, type FakeTwilio } from '../helpers/twilio.js';
import { until } from '../helpers/wait.js';
import { run } from '../helpers/run.js';
import { ensureBuilt, rootboxBin } from '../billing/api.js';
import { initRegistry } from '../helpers/cluster.js';
import { adminCli } from '../helpers/admincli.js';

let pg: TestPostgres;
let twilio: FakeTwilio;
let a: TestDaemon;
let b: TestDaemon;
/** Each daemon's clock for SMS time windows, moved instead of waiting out the 30 s resend gap. */
const skew = { a: 0, b: 0 };

const opts = (host: string) => ({
  publicIp: '127.0.0.1',
  cluster: { registry: pg.url, host, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s' },
  hosting: {
    rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 },
    sms: { provider: 'twilio', twilioBaseUrl: twilio.url, twilioAccountSid: twilio.sid, twilioAuthToken: twilio.token, twilioFrom: '+15005550006' },
  },
});
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}) =>
  send(d.http, 'api.localhost', method, path, { body: o.body, headers: o.key ? { authorization: `Bearer ${o.key}` } : {} });

test.before(async () => {
  pg = await startPostgres();
  twilio = await startTwilio();
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(p);
  await p.end();
  a = await startTestDaemon(opts('host-a'), {}, () => Date.now() + skew.a);
  b = await startTestDaemon(opts('host-b'), {}, () => Date.now() + skew.b);
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await twilio?.close();
  await pg?.stop();
});

test('an account made on host A works with its key on host B', async () => {
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  assert.is(await pg.sql(`SELECT count(*) FROM accounts WHERE host = 'host-a'`), '1', 'the account is in the registry');
  const onB = await api(b, 'GET', '/servers', { key: made.json.api_key });
  assert.is(onB.status, 200, onB.text);
  assert.equal(onB.json.servers, [], "B holds none of A's servers");
  assert.is((await api(b, 'GET', '/credits', { key: made.json.api_key })).status, 200);
  assert.is((await api(b, 'GET', '/servers', { key: 'rbx_' + 'x'.repeat(32) })).json.error, 'invalid_api_key');
});

test('a phone verified on A logs in on B with a code A texted and gets the same api_key', async () => {
  const phone = '+15005550201';
  assert.is((await api(a, 'POST', '/create', { body: { phone } })).json.verification_required, true);
  const signup = await api(a, 'POST', '/create', { body: { phone, code: twilio.codeFor(phone) } });
  assert.is(signup.status, 200, signup.text);
  assert.is(await pg.sql(`SELECT count(*) FROM accounts WHERE phone = '${phone}'`), '1');

  skew.a += 31_000; // past the 30 s gap between codes to one number
  assert.is((await api(a, 'POST', '/create', { body: { phone } })).json.verification_required, true);
  const login = await api(b, 'POST', '/create', { body: { phone, code: twilio.codeFor(phone) } });
  assert.is(login.status, 200, login.text);
  assert.is(login.json.api_key, signup.json.api_key);
  assert.match(login.json.account_note, /logged into the existing account/);
});

test('a key rotated on A is refused on B (which had cached it), and the new key works there', async () => {
  const made = await api(a, 'POST', '/create');
  assert.is((await api(b, 'GET', '/servers', { key: made.json.api_key })).status, 200);
  const rotated = await api(a, 'POST', '/account/rotate-key', { key: made.json.api_key });
  assert.is(rotated.status, 200, rotated.text);
  const old = await api(b, 'GET', '/servers', { key: made.json.api_key });
  assert.is(old.status, 401);
  assert.is(old.json.error, 'revoked_api_key');
  assert.is((await api(b, 'GET', '/servers', { key: rotated.json.api_key })).status, 200);
});

test("the operator's accounts show and rotate-key on host B find an account B never saw (made on A), and the rotation holds on A", async () => {
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  const id = await pg.sql(`SELECT id FROM accounts WHERE key_hash = encode(sha256('${made.json.api_key}'::bytea), 'hex')`);
  assert.match(id, /^acc_[0-9a-f]+$/);
  // the commands in this process (test/helpers/admincli.ts); the credit below runs bin/rootbox
  const cliB = (...args: string[]) => adminCli([...args, '--json'], { ...process.env, ROOTBOX_DATA_DIR: b.dataDir });
  const shown = await cliB('accounts', 'show', id);
  assert.is(shown.code, 0, shown.stderr + shown.stdout);
  assert.is(JSON.parse(shown.stdout).account.id, id);
  const rotated = await cliB('accounts', 'rotate-key', id);
  assert.is(rotated.code, 0, rotated.stderr + rotated.stdout);
  const fresh = JSON.parse(rotated.stdout).api_key as string;
  assert.is((await api(a, 'GET', '/servers', { key: made.json.api_key })).json.error, 'revoked_api_key');
  assert.is((await api(a, 'GET', '/servers', { key: fresh })).status, 200);
  assert.is((await api(a, 'DELETE', `/servers/${made.json.id}`, { key: fresh })).status, 200, "frees the address's anonymous server slot");
});

test('a credit made on host A shows at once in GET /credits on host B (no billing pass between)', async () => {
  ensureBuilt();
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  const id = await pg.sql(`SELECT id FROM accounts WHERE key_hash = encode(sha256('${made.json.api_key}'::bytea), 'hex')`);
  const before = await api(b, 'GET', '/credits', { key: made.json.api_key });
  assert.is(before.json.balance_usd, 0, before.text);
  const credited = await run(rootboxBin, ['accounts', 'credit', id, '7.5'], { env: { ...process.env, ROOTBOX_DATA_DIR: a.dataDir }, timeoutMs: 60_000 });
  assert.is(credited.code, 0, credited.stderr + credited.stdout);
  assert.is((await api(b, 'GET', '/credits', { key: made.json.api_key })).json.balance_usd, 7.5);
});

test("the per-address cap on anonymous servers counts every host's: with A holding the cap, an anonymous create on B answers ip_limit", async () => {
  const held = async () =>
    Number(await pg.sql(`SELECT count(*) FROM placements p JOIN accounts x ON x.id = p.account_id WHERE x.created_ip = '127.0.0.1' AND x.phone IS NULL`));
  while ((await held()) < 3) assert.is((await api(a, 'POST', '/create')).status, 200);
  const onBHeld = b.daemon.store.servers.all().filter((x) => !b.daemon.store.accounts.get(x.accountId)?.phone);
  assert.is(onBHeld.length, 0, 'B holds none of them');
  const onB = await api(b, 'POST', '/create');
  assert.is(onB.status, 403, onB.text);
  assert.is(onB.json.error, 'ip_limit');
});

test('the SMS resend limit counts the codes every host sent', async () => {
  const phone = '+15005550202';
  assert.is((await api(a, 'POST', '/create', { body: { phone } })).json.verification_required, true);
  const again = await api(b, 'POST', '/create', { body: { phone } });
  assert.is(again.status, 429, again.text);
  assert.is(again.json.error, 'sms_rate_limited');
});

test('concurrent code requests for one number on both hosts send one text', async () => {
  const phone = '+15005550204';
  skew.b = skew.a; // the hosts' clocks agree here (an earlier test moved A's past a resend gap)
  const all = await Promise.all(Array.from({ length: 8 }, (_, i) => api(i % 2 ? b : a, 'POST', '/create', { body: { phone } })));
  assert.is(twilio.messages.filter((m) => m.to === phone).length, 1, all.map((r) => `${r.status} ${r.json?.error ?? ''}`).join(', '));
  assert.is(all.filter((r) => r.status === 200).length, 1);
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'sms_rate_limited', r.text);
});

test('registry stopped: phone login answers 503 registry_unavailable, a key B cached still serves its servers; back: login works', async () => {
  const phone = '+15005550203';
  assert.is((await api(b, 'POST', '/create', { body: { phone } })).json.verification_required, true);
  const signup = await api(b, 'POST', '/create', { body: { phone, code: twilio.codeFor(phone) } });
  assert.is(signup.status, 200, signup.text);
  skew.b += 31_000;
  assert.is((await api(b, 'POST', '/create', { body: { phone } })).json.verification_required, true);
  const code = twilio.codeFor(phone);
  await pg.halt();
  try {
    const login = await api(b, 'POST', '/create', { body: { phone, code } });
    assert.is(login.status, 503, login.text);
    assert.is(login.json.error, 'registry_unavailable');
    const own = await api(b, 'GET', `/servers/${signup.json.id}`, { key: signup.json.api_key });
    assert.is(own.status, 200, own.text);
  } finally {
    await pg.start();
  }
  let again;
  await until('the registry answers again', async () => (again = await api(b, 'POST', '/create', { body: { phone, code } })).status !== 503, 10_000, 200);
  assert.is(again!.status, 200, again!.text);
  assert.is(again!.json.api_key, signup.json.api_key);
});

test.run();
