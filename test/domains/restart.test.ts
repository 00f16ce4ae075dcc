// A server's own domain over time, with the real daemon as a process (ProcDaemon: `rootbox serve`
// from the bundle, SIGKILLed and started again on the same data dir), a real Pebble issuing
// 45-second certificates and a real named: the active domain's certificate is renewed before it
// expires (a third of its lifetime left) and the new one is served to new connections; after a
// kill -9 and a start the domain still routes to its server and its stored certificate is served
// (chain verified against Pebble's root by curl).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect } from 'node:tls';
import { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { startNamed, type NamedServer } from '../helpers/named.js';
import { freePort, startPebble, type PebbleServer } from '../helpers/pebble.js';
import { run } from '../helpers/run.js';
import { send, type Answer } from '../http/contract.js';
import { until as waitUntil } from '../helpers/wait.js';
const until = <T>(what: string, cond: () => T | Promise<T>, ms = 60_000) => waitUntil(what, cond, ms, 250);

const DOMAIN = 'rbx.example.test';
const API = `api.${DOMAIN}`;
const NAME = 'www.example.test';
let named: NamedServer;
let pebble: PebbleServer;
let pd: ProcDaemon;
let rootPem = '';
let rootFile = '';
let key = '';
let id = '';

const api = (method: string, path: string, body?: unknown): Promise<Answer> =>
  send(pd.http, API, method, path, { body, headers: key ? { authorization: `Bearer ${key}` } : {} });

/** The certificate the daemon presents for `name` to a new connection, and whether it verifies against Pebble's root. */
function served(name: string): Promise<{ serial: string; authorized: boolean; validTo: string }> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: pd.https, servername: name, ca: rootPem, rejectUnauthorized: false }, () => {
      const c = s.getPeerCertificate();
      resolve({ serial: c.serialNumber, authorized: s.authorized, validTo: c.valid_to });
      s.end();
    });
    s.on('error', reject);
  });
}

async function curlStatus(name: string): Promise<number> {
  const r = await run('curl', [
    '-sS',
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    '--max-time',
    '15',
    '--resolve',
    `${name}:${pd.https}:127.0.0.1`,
    '--cacert',
    rootFile,
    `https://${name}:${pd.https}/`,
  ]);
  assert.is(r.code, 0, r.stderr);
  return Number(r.stdout);
}

test.before(async () => {
  named = await startNamed({ zones: ['example.test'] });
  const httpPort = await freePort();
  pebble = await startPebble({ dnsServer: named.server, httpPort, validitySeconds: 45 });
  rootPem = await pebble.issuingRoot();
  rootFile = await pebble.issuingRootFile();
  pd = new ProcDaemon({
    config: {
      domain: DOMAIN,
      http: { host: '127.0.0.1', port: httpPort },
      https: {
        host: '127.0.0.1',
        port: 0,
        acme: {
          directory: pebble.directory,
          caFile: pebble.caFile,
          renewBefore: '10s',
          retryAfter: '5s',
          dns: { provider: 'rfc2136', rfc2136: { server: named.server, zone: 'example.test', keyName: named.keyName, keySecret: named.keySecret } },
        },
      },
      hosting: { domains: { resolver: named.server, checkInterval: '500ms', attemptsPerHour: 5, limits: { anonymous: 1 } } },
    },
  });
  await pd.start();
});

test.after(async () => {
  await pd?.remove();
  await pebble?.stop();
  await named?.stop();
});

let first = '';
test('a domain goes active and its certificate is renewed before it expires; new connections get the new one', async () => {
  const c = await api('POST', '/create', { subdomains: ['alpha'] });
  assert.is(c.status, 200, c.text);
  [key, id] = [c.json.api_key, c.json.id];
  const add = await api('POST', `/servers/${id}/domains`, { domain: NAME });
  assert.is(add.status, 200, add.text);
  await named.add(`alpha.${DOMAIN}`, 'A', '127.0.0.1');
  await named.add(NAME, 'CNAME', `alpha.${DOMAIN}.`);
  await named.add(`_rootbox.${NAME}`, 'TXT', add.json.records.find((r: any) => r.type === 'TXT').value);
  await until('active', async () => ((await api('GET', `/servers/${id}/domains`)).json.domains[0]?.state === 'active' ? true : undefined));
  const one = await served(NAME);
  assert.ok(one.authorized, 'the first certificate verifies');
  first = one.serial;
  assert.is(await curlStatus(NAME), 200);
  const t0 = Date.now();
  const two = await until('a renewed certificate', async () => {
    const s = await served(NAME);
    return s.serial !== first ? s : undefined;
  });
  console.log(`   (renewed after ${Date.now() - t0} ms more; valid to ${two.validTo})`);
  assert.ok(two.authorized);
  const renewed = pd.logs.find((l) => l.msg === 'custom domain certificate renewed' && l.domain === NAME);
  const issued = pd.logs.find((l) => l.msg === 'custom domain active' && l.domain === NAME);
  assert.ok(renewed && issued);
  console.log(`   (HTTP-01 order against Pebble: first ${issued!.ms} ms, renewal ${renewed!.ms} ms)`);
  first = two.serial;
});

test('after kill -9 and a start the domain still routes and its stored certificate is served', async () => {
  const before = await served(NAME);
  await pd.kill();
  await pd.start();
  const after = await served(NAME);
  assert.ok(after.authorized, 'the stored certificate verifies against the root');
  assert.ok(
    after.serial === before.serial || pd.logs.some((l) => l.msg === 'custom domain certificate renewed' && l.pid === pd.child?.pid),
    'the stored one, or one renewed since',
  );
  assert.is(await curlStatus(NAME), 200);
  const list = await api('GET', `/servers/${id}/domains`);
  assert.is(list.json.domains[0].state, 'active');
  assert.equal((await api('GET', `/servers/${id}`)).json.usage.domains, [`alpha.${DOMAIN}`, NAME]);
});

test.run();
