// Servers' own domains end to end: a real daemon (runc containers) whose certificates come from
// a real Pebble, and a real BIND named that is authoritative for the customer's zone
// (example.test, under which the service's rbx.example.test lives); the daemon checks customers' records against it
// and Pebble resolves through it. A domain goes pending_dns → issuing → active once its CNAME and
// TXT are added with nsupdate, then serves the server's static page, its run.sh app and a
// WebSocket over HTTPS with a chain curl verifies against Pebble's root, and wakes the server;
// limits per tier (anonymous none, paid 3), another account's claim 409, the service's own
// domain refused, IDN → punycode, failed orders and their hourly cap, delete (routing and cert),
// `rootbox status` counting domains by state.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { callAdmin } from '../../src/admin/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startNamed, type NamedServer } from '../helpers/named.js';
import { freePort, startPebble, type PebbleServer } from '../helpers/pebble.js';
import { run } from '../helpers/run.js';
import { send, type Answer } from '../http/contract.js';
import { sh } from '../runtime/helpers/env.js';
import { until as waitUntil } from '../helpers/wait.js';
const until = <T>(what: string, cond: () => T | Promise<T>, ms = 60_000) => waitUntil(what, cond, ms, 200);

// The service lives under the customer's zone so that named (authoritative, no recursion) chases a
// customer's CNAME to <slug>.{domain} inside one zone when Pebble resolves it.
const DOMAIN = 'rbx.example.test';
const API = `api.${DOMAIN}`;
let named: NamedServer;
let pebble: PebbleServer;
let d: TestDaemon;
let root: string;

interface Acct {
  key: string;
  id: string;
  slug: string;
}
let A: Acct; // anonymous first, then paid
let B: Acct; // paid, another account

const api = (method: string, path: string, key?: string, body?: unknown): Promise<Answer> =>
  send(d.http, API, method, path, { body, headers: key ? { authorization: `Bearer ${key}` } : {} });

async function create(key?: string, slug?: string): Promise<Acct> {
  const r = await api('POST', '/create', key, slug ? { subdomains: [slug] } : undefined);
  assert.is(r.status, 200, r.text);
  return { key: key ?? r.json.api_key, id: r.json.id, slug: r.json.subdomain.split('.')[0] };
}

const domainOf = async (m: Acct, name: string) => ((await api('GET', `/servers/${m.id}/domains`, m.key)).json.domains as any[]).find((x) => x.domain === name);
async function stateIs(m: Acct, name: string, ...states: string[]) {
  let last: any;
  try {
    return await until(`${name} ${states.join('/')}`, async () => {
      last = await domainOf(m, name);
      return states.includes(last?.state) ? last : undefined;
    });
  } catch (e) {
    const logs = d.logs.filter((l) => l.level !== 'info' && l.level !== 'debug').slice(-6);
    throw new Error(`${(e as Error).message}; last ${JSON.stringify(last)}; logs ${JSON.stringify(logs).slice(0, 3000)}`);
  }
}

/** Runs a shell script in the server, waking it first when it sleeps. */
async function inServer(m: Acct, script: string, input?: string) {
  await d.daemon.presence.wake(m.id);
  return sh(d.daemon.runtime, m.id, script, input);
}

/** curl over HTTPS to the daemon as `host`, verifying the chain against Pebble's root. */
async function curl(host: string, path = '/', extra: string[] = []) {
  const r = await run('curl', [
    '-sS',
    '--max-time',
    '20',
    '--resolve',
    `${host}:${d.https}:127.0.0.1`,
    '--cacert',
    root,
    '-w',
    '\n%{http_code} %{http_version}',
    ...extra,
    `https://${host}:${d.https}${path}`,
  ]);
  const at = r.stdout.lastIndexOf('\n');
  const [status, version] = r.stdout.slice(at + 1).split(' ');
  return { code: r.code, status: Number(status), version, body: r.stdout.slice(0, at), err: r.stderr };
}

/** The shared HTTP/1.1 + WebSocket echo app (test/fixtures/echoapp.py); answers with the Host it got. */
const APP_PY = readFileSync(new URL('../fixtures/echoapp.py', import.meta.url), 'utf8');

test.before(async () => {
  named = await startNamed({ zones: ['example.test', 'other.test'] });
  const httpPort = await freePort();
  pebble = await startPebble({ dnsServer: named.server, httpPort });
  root = await pebble.issuingRootFile();
  d = await startTestDaemon({
    domain: DOMAIN,
    publicIp: '127.0.0.1',
    http: { host: '127.0.0.1', port: httpPort },
    https: {
      host: '127.0.0.1',
      port: 0,
      acme: {
        directory: pebble.directory,
        caFile: pebble.caFile,
        dns: { provider: 'rfc2136', rfc2136: { server: named.server, zone: 'example.test', keyName: named.keyName, keySecret: named.keySecret } },
      },
    },
    hosting: {
      anonServersPerIp: 5,
      rateLimit: { createsPerIpPerHour: 1000, perIpPerMinute: 2000, perKeyPerMinute: 2000 },
      domains: { resolver: named.server, checkInterval: '300ms', attemptsPerHour: 2, limits: { paid: 3 } },
    },
    proxy: { idleTimeout: '4s', idleCheckInterval: 200 },
  });
  A = await create(undefined, 'alpha');
});

test.after(async () => {
  await d?.stop();
  await pebble?.stop();
  await named?.stop();
});

test('an anonymous account may attach no domain: 403 domain_limit naming its tier and limit 0', async () => {
  const r = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'www.example.test' });
  assert.is(r.status, 403, r.text);
  assert.equal([r.json.error, r.json.tier, r.json.limit], ['domain_limit', 'anonymous', 0]);
  assert.match(r.json.detail, /verify a phone or add credit/);
});

test("the service's own domain and names under it are refused (400 reserved_domain); bad names 400 invalid_domain", async () => {
  assert.ok(await d.daemon.billing.credit(d.daemon.store.servers.get(A.id)!.accountId, 5, 'test:domains:A'));
  for (const domain of [DOMAIN, `alpha.${DOMAIN}`, `x.y.${DOMAIN.toUpperCase()}.`]) {
    const r = await api('POST', `/servers/${A.id}/domains`, A.key, { domain });
    assert.is(r.status, 400, r.text);
    assert.is(r.json.error, 'reserved_domain');
  }
  for (const domain of ['http://www.example.test/', 'www.example.test:443', '127.0.0.1', 'single']) {
    assert.is((await api('POST', `/servers/${A.id}/domains`, A.key, { domain })).json.error, 'invalid_domain', domain);
  }
});

test('a proven domain whose HTTP-01 validation fails is failed with a reason; at most attemptsPerHour orders, then 429 with Retry-After', async () => {
  // alpha.rbx.example.test has no address yet in DNS: the ownership check passes (CNAME + TXT), Pebble cannot reach the name
  const add = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'broken.example.test' });
  assert.is(add.status, 200, add.text);
  const txt = add.json.records.find((r: any) => r.type === 'TXT');
  await named.add('broken.example.test', 'CNAME', `alpha.${DOMAIN}.`);
  await named.add(txt.name, 'TXT', txt.value);
  const failed = await stateIs(A, 'broken.example.test', 'failed');
  assert.ok(failed.reason && !/\/tmp|\/var|\/work/.test(failed.reason), failed.reason);
  const again = await api('POST', `/servers/${A.id}/domains/broken.example.test/check`, A.key);
  assert.is(again.status, 200, again.text);
  assert.ok(['issuing', 'failed'].includes(again.json.state), again.text);
  await stateIs(A, 'broken.example.test', 'failed');
  const capped = await api('POST', `/servers/${A.id}/domains/broken.example.test/check`, A.key);
  assert.is(capped.status, 429, capped.text);
  assert.is(capped.json.error, 'issuance_rate_limited');
  assert.ok(Number(capped.headers['retry-after']) > 60, `Retry-After ${capped.headers['retry-after']}`);
  // deleting and adding again buys no more orders
  assert.is((await api('DELETE', `/servers/${A.id}/domains/broken.example.test`, A.key)).status, 200);
  assert.is((await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'broken.example.test' })).status, 200);
  assert.is((await api('POST', `/servers/${A.id}/domains/broken.example.test/check`, A.key)).status, 429);
  assert.is((await api('DELETE', `/servers/${A.id}/domains/broken.example.test`, A.key)).status, 200);
});

let token = '';
test('POST answers the records to create (CNAME to <slug>.{domain} and the TXT token; A for an apex); the domain waits in pending_dns', async () => {
  await named.add(`alpha.${DOMAIN}`, 'A', '127.0.0.1');
  const r = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'WWW.Example.Test.' });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.domain, 'www.example.test');
  assert.is(r.json.state, 'pending_dns');
  const cname = r.json.records.find((x: any) => x.type === 'CNAME');
  const txt = r.json.records.find((x: any) => x.type === 'TXT');
  assert.equal(cname, { type: 'CNAME', name: 'www.example.test', value: `alpha.${DOMAIN}` });
  assert.is(txt.name, '_rootbox.www.example.test');
  token = txt.value;
  assert.match(token, /^[0-9a-f]{32,}$/);
  const again = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'www.example.test' });
  assert.equal(again.json.records, r.json.records, 'asking again answers the same records');
  const apex = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'example.test' });
  assert.equal(
    apex.json.records.find((x: any) => x.type !== 'TXT'),
    { type: 'A', name: 'example.test', value: '127.0.0.1' },
  );
  const checked = await api('POST', `/servers/${A.id}/domains/www.example.test/check`, A.key);
  assert.is(checked.json.state, 'pending_dns');
  assert.match(checked.json.reason, /TXT _rootbox\.www\.example\.test/);
  assert.match(checked.json.reason, /CNAME to alpha\.rbx\.example\.test/);
  const plain = await send(d.http, 'www.example.test', 'GET', '/');
  assert.is(plain.status, 404, 'a pending domain is not routed');
});

test('IDN names are stored as punycode and found by either form', async () => {
  const r = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'Bücher.example.test' });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.domain, 'xn--bcher-kva.example.test');
  assert.is(r.json.records[0].name, 'xn--bcher-kva.example.test');
  const c = await api('POST', `/servers/${A.id}/domains/${encodeURIComponent('bücher.example.test')}/check`, A.key);
  assert.is(c.status, 200, c.text);
  assert.is(c.json.domain, 'xn--bcher-kva.example.test');
});

test("over the tier's limit: 403 domain_limit (paid: 3 in all)", async () => {
  const r = await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'fourth.example.test' });
  assert.is(r.status, 403, r.text);
  assert.equal([r.json.error, r.json.tier, r.json.limit], ['domain_limit', 'paid', 3]);
  assert.is((await api('DELETE', `/servers/${A.id}/domains/example.test`, A.key)).status, 200);
  assert.is((await api('DELETE', `/servers/${A.id}/domains/${encodeURIComponent('bücher.example.test')}`, A.key)).status, 200);
});

test("another account's claim of a domain is refused with 409 domain_taken", async () => {
  B = await create(undefined, 'bravo');
  assert.ok(await d.daemon.billing.credit(d.daemon.store.servers.get(B.id)!.accountId, 5, 'test:domains:B'));
  const r = await api('POST', `/servers/${B.id}/domains`, B.key, { domain: 'www.example.test' });
  assert.is(r.status, 409, r.text);
  assert.is(r.json.error, 'domain_taken');
  assert.match(r.json.detail, /_rootbox\.www\.example\.test/, 'an unproven claim names the TXT that would take it over');
  assert.not.match(r.json.detail, new RegExp(token), "the holder's token is not shown");
});

test('once its CNAME and TXT exist the domain goes pending → active by the scheduled check; usage.domains lists it', async () => {
  const t0 = Date.now();
  await named.add('www.example.test', 'CNAME', `alpha.${DOMAIN}.`);
  await named.add('_rootbox.www.example.test', 'TXT', token);
  const active = await stateIs(A, 'www.example.test', 'active');
  console.log(`   (records added → active: ${Date.now() - t0} ms)`);
  assert.is(active.reason, null);
  assert.ok(active.active_at);
  const s = await api('GET', `/servers/${A.id}`, A.key);
  assert.equal(s.json.usage.domains, [`alpha.${DOMAIN}`, 'www.example.test']);
  assert.ok(d.daemon.acme.certificates.load('www.example.test'), 'the certificate is stored');
  const status = await callAdmin(d.dataDir, 'GET', '/status');
  assert.equal((status!.body.domains as any).by_state.active, 1, 'rootbox status counts it');
  const late = await api('POST', `/servers/${B.id}/domains`, B.key, { domain: 'www.example.test' });
  assert.is(late.status, 409);
  assert.match(late.json.detail, /another account/);
});

test("the active domain serves the server's static page over HTTPS (HTTP/2) with a chain verified against Pebble's root", async () => {
  const w = await inServer(A, 'mkdir -p /root/www && echo "<p>alpha static</p>" > /root/www/index.html');
  assert.is(w.code, 0, w.err);
  const r = await curl('www.example.test');
  assert.is(r.code, 0, r.err);
  assert.is(r.status, 200, r.body);
  assert.is(r.version, '2');
  assert.match(r.body, /alpha static/);
  const other = await curl(`alpha.${DOMAIN}`);
  assert.is(other.body, r.body, 'the same page as its subdomain');
});

test('the active domain reaches the run.sh app (Host kept) and its WebSockets; a sleeping server is woken by a request for it', async () => {
  const w = await inServer(
    A,
    `cat > /root/app.py && printf '#!/bin/bash\\nexec python3 /root/app.py \"app host={host} path={path}\"\\n' > /root/run.sh && chmod +x /root/run.sh`,
    APP_PY,
  );
  assert.is(w.code, 0, w.err);
  const r = await until('the app answers', async () => {
    const x = await curl('www.example.test', '/hello');
    return x.body.startsWith('app ') ? x : undefined;
  });
  assert.is(r.code, 0, r.err);
  assert.is(r.body, `app host=www.example.test:${d.https} path=/hello`);
  const ca = await pebble.issuingRoot();
  const ws = new WebSocket(`wss://www.example.test:${d.https}/ws`, {
    ca,
    lookup: ((_h: string, o: any, cb: any) => (o?.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4))) as any,
  });
  await new Promise((res, rej) => (ws.once('open', res), ws.once('error', rej)));
  const echo = new Promise<string>((res) => ws.once('message', (m) => res(m.toString())));
  ws.send('over a custom domain');
  assert.is(await echo, 'over a custom domain');
  ws.close();
  await until('sleep', async () => (d.daemon.runtime.get(A.id)?.state === 'sleeping' ? true : undefined), 30_000);
  const woke = await until('the app answers after a wake', async () => {
    const x = await curl('www.example.test', '/woken');
    return x.body.startsWith('app ') ? x : undefined;
  });
  assert.match(woke.body, /path=\/woken/);
});

test('delete removes routing and the certificate: the name is unknown again and its TLS no longer verifies', async () => {
  const r = await api('DELETE', `/servers/${A.id}/domains/www.example.test`, A.key);
  assert.is(r.status, 200, r.text);
  assert.is(d.daemon.acme.certificates.load('www.example.test'), undefined);
  assert.is((await send(d.http, 'www.example.test', 'GET', '/')).status, 404);
  const tls = await curl('www.example.test');
  assert.is.not(tls.code, 0, 'curl refuses the default certificate for the name');
  assert.equal((await api('GET', `/servers/${A.id}`, A.key)).json.usage.domains, [`alpha.${DOMAIN}`]);
  assert.equal((await api('GET', `/servers/${A.id}/domains`, A.key)).json.domains, []);
  assert.is((await api('DELETE', `/servers/${A.id}/domains/www.example.test`, A.key)).status, 404);
});

test("an unproven claim yields to the account that publishes its own TXT token; the first holder's record is gone", async () => {
  assert.is((await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'take.other.test' })).status, 200);
  const refused = await api('POST', `/servers/${B.id}/domains`, B.key, { domain: 'take.other.test' });
  assert.is(refused.status, 409, refused.text);
  const mine = /TXT (\S+) "([0-9a-f]+)"/.exec(refused.json.detail);
  assert.ok(mine, refused.json.detail);
  assert.is(mine![1], '_rootbox.take.other.test');
  await named.add(mine![1], 'TXT', mine![2]);
  const taken = await api('POST', `/servers/${B.id}/domains`, B.key, { domain: 'take.other.test' });
  assert.is(taken.status, 200, taken.text);
  assert.is(taken.json.server, B.id);
  assert.is(taken.json.records.find((r: any) => r.type === 'TXT').value, mine![2]);
  assert.equal((await api('GET', `/servers/${A.id}/domains`, A.key)).json.domains, []);
});

test('deleting a server releases its domains (another account may then claim them)', async () => {
  const r = await api('POST', `/servers/${B.id}/domains`, B.key, { domain: 'shop.other.test' });
  assert.is(r.status, 200, r.text);
  assert.is((await api('DELETE', `/servers/${B.id}`, B.key)).status, 200);
  assert.is(d.daemon.store.domains.get('shop.other.test'), undefined);
  assert.is(d.daemon.store.domains.get('take.other.test'), undefined);
  assert.is((await api('POST', `/servers/${A.id}/domains`, A.key, { domain: 'shop.other.test' })).status, 200);
});

test.run();
