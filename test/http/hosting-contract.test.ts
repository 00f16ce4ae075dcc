// The hosting API against its own /openapi.json: a real daemon (runc containers, LMDB, local
// Twilio and x402 facilitator) is driven through every declared route with good and bad input,
// and every answer — status, required headers, content type, JSON body — must be what the
// published document says (test/http/contract.ts). A route answering anything undocumented fails.
import { Validator } from '@seriousme/openapi-schema-validator';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeHeader } from '../../src/payments/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startTwilio, type FakeTwilio } from '../helpers/twilio.js';
import { LocalFacilitator } from '../payments/fixtures/facilitator.js';
import { encode, newPayer, signPayment, type Terms } from '../payments/fixtures/payer.js';
import { Contract, send, type Answer, type SendOptions } from './contract.js';

const HOUR = 3_600_000;
let d: TestDaemon;
let twilio: FakeTwilio;
let fac: LocalFacilitator;
let c: Contract;
let clock = Date.now() + HOUR;
/** The daemon's clock of its request-rate buckets, held still where a test counts to a limit (however slow the requests). */
let frozen: number | undefined;

test.before(async () => {
  twilio = await startTwilio();
  fac = await new LocalFacilitator().start();
  d = await startTestDaemon(
    {
      publicIp: '127.0.0.1',
      billing: { grantRamGbHours: 0.001, verifiedGrantRamGbHours: 0.001, grantEgressGb: 1, meterInterval: '1h' },
      verify: { x402: { payTo: '0x' + '5a'.repeat(20), facilitatorUrl: fac.url, facilitatorTimeout: '1s', settleTimeout: '1s' } },
      hosting: {
        portPool: '25871-25874',
        rateLimit: { perIpPerMinute: 600, createsPerIpPerHour: 40 },
        sms: { provider: 'twilio', twilioBaseUrl: twilio.url, twilioAccountSid: twilio.sid, twilioAuthToken: twilio.token, twilioFrom: '+15005550006' },
      },
    },
    {},
    () => frozen ?? Date.now(),
  );
  const doc = await send(d.http, 'api.localhost', 'GET', '/openapi.json');
  c = new Contract(doc.json, 'hosting');
  c.check('GET', '/openapi.json', doc);
});
test.after(async () => {
  await d?.stop();
  await twilio?.close();
  await fac?.stop();
});

/** A request whose answer must match the document. */
const call = async (method: string, path: string, o: SendOptions & { key?: string } = {}): Promise<Answer> =>
  c.check(
    method,
    path,
    await send(d.http, 'api.localhost', method, path, { ...o, headers: { ...(o.key ? { authorization: `Bearer ${o.key}` } : {}), ...o.headers } }),
  );
const expect = async (status: number, method: string, path: string, o: SendOptions & { key?: string } = {}) => {
  const a = await call(method, path, o);
  assert.is(a.status, status, `${method} ${path}: ${a.text.slice(0, 300)}`);
  return a;
};
const passHours = async (hours: number) => {
  await d.daemon.billing.tick((clock += HOUR));
  await d.daemon.billing.tick((clock += hours * HOUR));
};

let A: Answer; // anonymous account and its server
let V: Answer; // phone-verified account and its server

test('the published document is valid OpenAPI 3.1 and has no ±2^53 stand-in integer bounds', async () => {
  const r = await new Validator().validate(c.doc);
  assert.ok(r.valid, JSON.stringify(r.errors));
  assert.not.match(JSON.stringify(c.doc), /900719925474099[01]/);
  assert.ok(c.doc.paths['/usage'].get.parameters.some((p: any) => p.name === 'limit' && p.schema.minimum === 1 && p.schema.maximum === 500));
});

test('POST /create answers each documented outcome: server, verification_required, 400, 401, 403, 409, 413, 415, 502', async () => {
  A = await expect(200, 'POST', '/create');
  await expect(200, 'POST', '/create', { body: { phone: '+15005550101' } });
  V = await expect(200, 'POST', '/create', { body: { phone: '+15005550101', code: twilio.codeFor('+15005550101') } });
  for (const body of [{ bogus: 1 }, { code: '123456' }, { phone: 'not a number' }, { subdomains: 'x' }, '{"subdomains":'])
    assert.ok((await expect(400, 'POST', '/create', { body })).json.error);
  assert.ok((await expect(400, 'POST', '/create', { body: { bogus: 1 } })).json.issues.length, '400 lists its issues');
  await expect(401, 'POST', '/create', { key: 'rbx_short' });
  await expect(403, 'POST', '/create', { key: A.json.api_key, body: { never_sleep: true } });
  await expect(409, 'POST', '/create', { key: A.json.api_key, body: { subdomains: [A.json.subdomain.split('.')[0]] } });
  await expect(413, 'POST', '/create', { body: { subdomains: ['x'.repeat(17 * 1024)] } });
  await expect(415, 'POST', '/create', { body: 'phone=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  twilio.mode = 'server_error';
  await expect(502, 'POST', '/create', { body: { phone: '+15005550102' } });
  twilio.mode = 'ok';
});

test('server routes answer 200, 401 and 404 (unknown, malformed and foreign ids) as documented', async () => {
  const key = A.json.api_key;
  assert.is((await expect(200, 'GET', '/servers', { key })).json.servers.length, 1);
  await expect(401, 'GET', '/servers');
  await expect(401, 'GET', '/servers', { key: 'rbx_' + 'A'.repeat(32) });
  await expect(200, 'GET', `/servers/${A.json.id}`, { key });
  for (const id of ['srv_ffffffff', 'nope', V.json.id]) await expect(404, 'GET', `/servers/${id}`, { key });
  await expect(200, 'POST', `/servers/${A.json.id}/restart`, { key });
  await expect(404, 'POST', '/servers/srv_0/restart', { key });
  await expect(404, 'DELETE', '/servers/srv_0', { key });
  await expect(200, 'GET', '/credits', { key });
  await expect(200, 'POST', '/account/rotate-key', { key: V.json.api_key }).then((r) => (V.json.api_key = r.json.api_key));
});

test('GET /servers/:id/logs answers lines, events and oom_kills; 400 for tail 0, 1001, abc and 1.5; 401; 404 for unknown and foreign ids', async () => {
  const key = A.json.api_key;
  const r = await expect(200, 'GET', `/servers/${A.json.id}/logs`, { key });
  assert.equal([Array.isArray(r.json.lines), Array.isArray(r.json.events), r.json.oom_kills], [true, true, 0]);
  for (const q of ['tail=0', 'tail=1001', 'tail=abc', 'tail=1.5', 'tail=']) await expect(400, 'GET', `/servers/${A.json.id}/logs?${q}`, { key });
  for (const q of ['?tail=1', '?tail=1000']) await expect(200, 'GET', `/servers/${A.json.id}/logs${q}`, { key });
  for (const id of ['srv_ffffffff', 'nope', V.json.id]) await expect(404, 'GET', `/servers/${id}/logs`, { key });
  await expect(401, 'GET', `/servers/${A.json.id}/logs`);
});

test('POST /servers/:id/exec answers exit code and output (400 bad input, 404 foreign); /servers/:id/files answers 404 for nothing there and 400 for bad paths', async () => {
  const key = A.json.api_key;
  const id = A.json.id;
  const r = await expect(200, 'POST', `/servers/${id}/exec`, { key, body: { command: 'echo contract; exit 4' } });
  assert.equal([r.json.exit_code, r.json.stdout, r.json.truncated, r.json.timed_out], [4, 'contract\n', false, false]);
  for (const body of [
    {},
    { command: '' },
    { command: [] },
    { command: 'true', timeout: -1 },
    { command: 'true', env: { 'BAD NAME': 'x' } },
    { command: 'true', extra: 1 },
  ])
    await expect(400, 'POST', `/servers/${id}/exec`, { key, body });
  await expect(404, 'POST', `/servers/${V.json.id}/exec`, { key, body: { command: 'true' } });
  await expect(401, 'POST', `/servers/${id}/exec`, { body: { command: 'true' } });
  const none = `/rbx-contract-none-${process.pid}`;
  assert.is((await expect(404, 'GET', `/servers/${id}/files?path=${none}`, { key })).json.error, 'file_not_found');
  await expect(404, 'GET', `/servers/${id}/files?path=${none}&list=1`, { key });
  await expect(400, 'GET', `/servers/${id}/files?path=relative`, { key });
  await expect(400, 'PUT', `/servers/${id}/files?path=/a/../b`, { key, body: 'x' });
  await expect(400, 'PUT', `/servers/${id}/files?path=/x&mode=999`, { key, body: 'x' });
  await expect(400, 'DELETE', `/servers/${id}/files?path=relative`, { key });
  await expect(404, 'DELETE', `/servers/${id}/files?path=${none}`, { key });
  await expect(400, 'POST', `/servers/${id}/files/archive?path=relative`, { key, body: 'x' });
  await expect(404, 'POST', `/servers/${V.json.id}/files/archive?path=/x`, { key, body: 'x' });
});

test('domain routes answer as documented: the list, 400 for bad names, 503 without an ACME directory, 404, 401 (the rest with ACME in test/domains)', async () => {
  const [v, id] = [V.json.api_key, V.json.id];
  assert.equal((await expect(200, 'GET', `/servers/${id}/domains`, { key: v })).json.domains, []);
  for (const domain of ['https://www.example.com/', 'printer.local', 'blog.localhost', '192.0.2.1']) {
    assert.is((await expect(400, 'POST', `/servers/${id}/domains`, { key: v, body: { domain } })).json.error, 'invalid_domain');
  }
  await expect(400, 'POST', `/servers/${id}/domains`, { key: v, body: { domain: 'www.example.com', extra: 1 } });
  assert.is((await expect(503, 'POST', `/servers/${id}/domains`, { key: v, body: { domain: 'www.example.com' } })).json.error, 'not_configured');
  await expect(404, 'POST', `/servers/${id}/domains/www.example.com/check`, { key: v });
  await expect(404, 'DELETE', `/servers/${id}/domains/www.example.com`, { key: v });
  for (const path of [`/servers/${A.json.id}/domains`, '/servers/srv_0/domains']) await expect(404, 'GET', path, { key: v });
  await expect(401, 'GET', `/servers/${id}/domains`);
});

test('GET /usage refuses limit 0, abc, 501 and 1.5 with 400 and takes 1 to 500 (documented 1..500)', async () => {
  const key = A.json.api_key;
  for (const q of ['limit=0', 'limit=abc', 'limit=501', 'limit=1.5', 'limit=', 'cursor=garbage']) await expect(400, 'GET', `/usage?${q}`, { key });
  for (const q of ['', '?limit=1', '?limit=500']) await expect(200, 'GET', `/usage${q}`, { key });
});

test('POST and DELETE /expose answer 200, 400, 403 with the limit, 404 and 503 as documented', async () => {
  const [a, v] = [A.json.api_key, V.json.api_key];
  for (const port of [7001, 7002]) await expect(200, 'POST', '/expose', { key: a, body: { server: A.json.id, port } });
  const lim = await expect(403, 'POST', '/expose', { key: a, body: { server: A.json.id, port: 7003 } });
  assert.equal([lim.json.limit, lim.json.scope], [2, 'server']);
  for (const body of [{ server: A.json.id, port: 0 }, { server: 'nope', port: 80 }, { server: A.json.id }])
    await expect(400, 'POST', '/expose', { key: a, body });
  await expect(404, 'POST', '/expose', { key: a, body: { server: V.json.id, port: 80 } });
  let full: Answer | undefined;
  for (let port = 7001; port < 7006 && !full; port++) {
    const r = await call('POST', '/expose', { key: v, body: { server: V.json.id, port } });
    if (r.status === 503) full = r;
    else assert.is(r.status, 200, r.text);
  }
  assert.ok(full, 'a full port pool answers 503');
  await expect(200, 'DELETE', '/expose', { key: a, body: { server: A.json.id, port: 7002 } });
  await expect(404, 'DELETE', '/expose', { key: a, body: { server: A.json.id, port: 7002 } });
  await expect(400, 'DELETE', '/expose', { key: a, body: { server: A.json.id, port: 'x' } });
});

test('GET / answers the landing page as JSON for agents and as HTML for browsers', async () => {
  assert.is((await expect(200, 'GET', '/')).json.create.curl, 'curl -X POST http://api.localhost/create');
  assert.match((await expect(200, 'GET', '/', { headers: { accept: 'text/html' } })).text, /<h1>/);
});

test('/account/recharge answers JSON and HTML, 400 for bad amounts and 402 with x402 terms', async () => {
  const key = A.json.api_key;
  assert.ok((await expect(200, 'GET', '/account/recharge', { key })).json.credits);
  assert.is((await expect(200, 'GET', '/account/recharge')).json.credits, undefined, 'without a key: the instructions only');
  await expect(200, 'GET', '/account/recharge', { headers: { accept: 'text/html' } });
  await expect(401, 'GET', '/account/recharge', { key: 'rbx_' + 'B'.repeat(32) });
  const html = await expect(200, 'GET', '/account/recharge', { key, headers: { accept: 'text/html' } });
  assert.match(html.text, /<h1>Add credit<\/h1>/);
  for (const body of [{ usd: 'five' }, {}, { usd: 0 }, { usd: 1e9 }, { usd: 1, more: 1 }]) await expect(400, 'POST', '/account/recharge', { key, body });
  const unpaid = await expect(402, 'POST', '/account/recharge', { key, body: { usd: 2 } });
  assert.is(unpaid.json.accepts[0].amount, '2000000');
  await expect(402, 'POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': 'garbage' } });
});

test('POST /feedback answers 200 (a JSON body under any declared type), 400, 413, 415 (a body that is not JSON under another type) and 429 with Retry-After', async () => {
  await expect(200, 'POST', '/feedback', { body: { message: 'hello' } });
  await expect(400, 'POST', '/feedback', { body: { message: '' } });
  await expect(413, 'POST', '/feedback', { body: { message: 'x'.repeat(17 * 1024) } });
  await expect(415, 'POST', '/feedback', { body: 'hi', headers: { 'content-type': 'text/plain' } });
  // what `curl -d '{…}'` sends: JSON under a form's content type is taken as JSON
  await expect(200, 'POST', '/feedback', { body: '{"message":"from curl -d"}', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  let last: Answer | undefined;
  for (let i = 0; i < 8 && last?.status !== 429; i++) last = await call('POST', '/feedback', { body: { message: `m${i}` } });
  assert.is(last?.status, 429);
  assert.ok(Number(last!.headers['retry-after']) >= 1);
});

test('every path answers a method it does not declare with 405 and Allow, as documented', async () => {
  for (const [path, ops] of Object.entries(c.doc.paths as Record<string, object>)) {
    const method = ['PUT', 'PATCH', 'DELETE', 'POST', 'GET'].find((m) => !(m.toLowerCase() in ops))!;
    const r = await expect(405, method, path.replace('{id}', A.json.id).replace('{domain}', 'www.example.com'), { key: A.json.api_key });
    assert.ok(r.headers.allow, path);
  }
});

test('an address over its request or create rate gets 429 with Retry-After', async () => {
  frozen = Date.now(); // no refill while the requests are sent: the 601st is over, however slow the machine
  try {
    let r: Answer | undefined;
    for (let i = 0; i < 700 && r?.status !== 429; i++) r = await call('GET', '/credits', { from: '127.0.0.3' });
    assert.is(r?.status, 429);
    r = undefined;
    for (let i = 0; i < 45 && r?.status !== 429; i++) r = await call('POST', '/create', { from: '127.0.0.2', body: { bogus: 1 } });
    assert.is(r?.status, 429);
  } finally {
    frozen = undefined;
  }
});

test('an exhausted account gets the 402 envelope on reads and /create; a suspended server 402 on restart; a paid recharge 200', async () => {
  const key = A.json.api_key;
  await passHours(2);
  for (const path of ['/servers', `/servers/${A.json.id}`, '/credits']) assert.is((await expect(402, 'GET', path, { key })).json.upgrade_required, true);
  await expect(402, 'POST', '/create', { key });
  assert.is((await expect(402, 'POST', `/servers/${A.json.id}/exec`, { key, body: { command: 'true' } })).json.upgrade_required, true);
  assert.is((await expect(402, 'GET', `/servers/${A.json.id}/files?path=/root&list=1`, { key })).json.upgrade_required, true);
  await passHours(49);
  assert.is((await expect(402, 'GET', `/servers/${A.json.id}`, { key })).json.suspended, true);
  assert.is((await expect(402, 'POST', `/servers/${A.json.id}/restart`, { key })).json.error, 'suspended');
  const unpaid = await expect(402, 'POST', '/account/recharge', { key, body: { usd: 2 } });
  const terms = (decodeHeader(unpaid.headers['payment-required'], 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0];
  const paid = await expect(200, 'POST', '/account/recharge', {
    key,
    body: { usd: 2 },
    headers: { 'x-payment': encode(await signPayment(newPayer(), terms)) },
  });
  assert.is(paid.json.credited_usd, 2);
  await expect(200, 'GET', '/credits', { key });
});

test('delete answers 200 and the server is gone; /healthz answers', async () => {
  await expect(200, 'DELETE', `/servers/${V.json.id}`, { key: V.json.api_key });
  await expect(404, 'GET', `/servers/${V.json.id}`, { key: V.json.api_key });
  await expect(200, 'GET', '/healthz');
});

test('the MCP endpoint answers JSON-RPC as documented: initialize and tools/list, a bad key 401, a bad Accept 406, not JSON-RPC 400', async () => {
  const rpc = (method: string, id = 1) => ({
    jsonrpc: '2.0',
    id,
    method,
    params: method === 'initialize' ? { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'contract', version: '1' } } : {},
  });
  const accept = { accept: 'application/json, text/event-stream' };
  const init = await expect(200, 'POST', '/mcp', { headers: accept, body: rpc('initialize') });
  assert.is(init.json.result.serverInfo.name, 'rootbox');
  const listed = await expect(200, 'POST', '/mcp', { key: A.json.api_key, headers: accept, body: rpc('tools/list', 2) });
  assert.ok(listed.json.result.tools.length > 1);
  await expect(202, 'POST', '/mcp', { headers: accept, body: { jsonrpc: '2.0', method: 'notifications/initialized' } });
  assert.is((await expect(401, 'POST', '/mcp', { key: 'rbx_' + 'q'.repeat(32), headers: accept, body: rpc('tools/list') })).json.error, 'invalid_api_key');
  await expect(406, 'POST', '/mcp', { headers: { accept: 'text/html' }, body: rpc('tools/list') });
  await expect(400, 'POST', '/mcp', { headers: accept, body: { hello: 'world' } });
});

test('the checkpoint routes: 404 for a server or checkpoint not yours, 400 for bad input, 401 without a key, 503 where servers are not containers', async () => {
  const key = A.json.api_key;
  const id = A.json.id;
  const none = 'ckp_0000000000000000000000';
  assert.equal((await expect(200, 'GET', `/servers/${id}/checkpoints`, { key })).json, { checkpoints: [] });
  // this tier's servers are plain processes: there is no disk to copy
  assert.is((await expect(503, 'POST', `/servers/${id}/checkpoints`, { key, body: { comment: 'x' } })).json.error, 'not_configured');
  assert.is((await expect(503, 'POST', `/servers/${id}/fork`, { key, body: {} })).json.error, 'not_configured');
  await expect(400, 'POST', `/servers/${id}/checkpoints`, { key, body: { comment: 'x'.repeat(201) } });
  await expect(400, 'POST', `/servers/${id}/restore`, { key, body: {} });
  await expect(400, 'POST', `/servers/${id}/fork`, { key, body: { nope: 1 } });
  assert.is((await expect(404, 'POST', `/servers/${id}/restore`, { key, body: { checkpoint: none } })).json.error, 'checkpoint_not_found');
  assert.is((await expect(404, 'DELETE', `/servers/${id}/checkpoints/${none}`, { key })).json.error, 'checkpoint_not_found');
  assert.is((await expect(404, 'POST', `/servers/${id}/fork`, { key, body: { checkpoint: none } })).json.error, 'checkpoint_not_found');
  for (const server of ['srv_ffffffff', V.json.id]) {
    await expect(404, 'GET', `/servers/${server}/checkpoints`, { key });
    await expect(404, 'POST', `/servers/${server}/checkpoints`, { key, body: {} });
    await expect(404, 'DELETE', `/servers/${server}/checkpoints/${none}`, { key });
    await expect(404, 'POST', `/servers/${server}/restore`, { key, body: { checkpoint: none } });
    await expect(404, 'POST', `/servers/${server}/fork`, { key, body: {} });
  }
  await expect(401, 'GET', `/servers/${id}/checkpoints`);
  await expect(401, 'POST', `/servers/${id}/restore`, { body: { checkpoint: none } });
});

test('every declared route was exercised', () => {
  const { missing, unseen } = c.coverage();
  console.log(`documented statuses not reached here: ${unseen.join('; ')}`);
  assert.equal(missing, []);
});

test.run();
