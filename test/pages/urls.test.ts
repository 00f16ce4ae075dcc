// Every absolute URL a daemon writes — upgrade_url, OpenAPI `servers` of both APIs, the recharge
// endpoint, the landing page's links, a server page's links — and the ssh line's host, from the
// configured public scheme, port and ssh host; and, with nothing configured, as the client
// reached the daemon, non-default port included, over HTTP and over HTTPS (real curl, real TLS
// with the daemon's CA, real containers).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { curl } from './helpers.js';

const HOUR = 3_600_000;
let d: TestDaemon | undefined;
test.after.each(async () => {
  await d?.stop();
  d = undefined;
});

test('configured public.scheme, public.port and public.sshHost make every absolute URL and the ssh line', async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    public: { scheme: 'https', port: 443, sshHost: 'box.example.test' },
    billing: { grantRamGbHours: 0, meterInterval: '1h' },
  });
  const http = `http://api.localhost:${d.http}`;
  const made = await curl(`${http}/create`, { method: 'POST' });
  assert.is(made.status, 200, made.text);
  assert.is(made.json.ssh, `ssh -i ~/.ssh/${made.json.id} root@box.example.test -p ${d.daemon.ssh.port}`);
  assert.equal((await curl(`${http}/openapi.json`)).json.servers, [{ url: 'https://api.localhost' }]);
  assert.equal((await curl(`http://verify.localhost:${d.http}/openapi.json`)).json.servers, [{ url: 'https://verify.localhost' }]);
  const landing = (await curl(`${http}/`)).json;
  assert.equal(
    [landing.create.url, landing.recharge, landing.verify.info],
    ['https://api.localhost/create', 'https://api.localhost/account/recharge', 'https://verify.localhost/v1/info'],
  );
  assert.is((await curl(`${http}/account/recharge`)).json.endpoint, 'https://api.localhost/account/recharge');
  const page = await curl(`http://${made.json.subdomain}:${d.http}/`, { accept: 'text/html' });
  assert.match(page.text, 'href="https://api.localhost/"');
  await d.daemon.billing.tick(Date.now() + HOUR);
  const env = await curl(`${http}/credits`, { key: made.json.api_key });
  assert.is(env.status, 402);
  assert.is(env.json.upgrade_url, 'https://api.localhost/account/recharge');
  assert.match(env.json.message, '(POST https://api.localhost/account/recharge)');
});

test('with nothing configured, URLs keep the scheme and the non-default port the client used, over HTTP and HTTPS', async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1', billing: { grantRamGbHours: 0, meterInterval: '1h' } });
  const cacert = d.daemon.tls.caFile!;
  const http = `http://api.localhost:${d.http}`;
  const https = `https://api.localhost:${d.https}`;
  const made = await curl(`${https}/create`, { method: 'POST', cacert });
  assert.is(made.status, 200, made.text);
  assert.is(made.json.ssh, `ssh -i ~/.ssh/${made.json.id} root@127.0.0.1 -p ${d.daemon.ssh.port}`);
  for (const [origin, o] of [
    [http, {}],
    [https, { cacert }],
  ] as const) {
    assert.equal((await curl(`${origin}/openapi.json`, o)).json.servers, [{ url: origin }]);
    assert.is((await curl(`${origin}/`, o)).json.create.url, `${origin}/create`);
    assert.is((await curl(`${origin}/account/recharge`, o)).json.endpoint, `${origin}/account/recharge`);
  }
  const verify = `https://verify.localhost:${d.https}`;
  assert.equal((await curl(`${verify}/openapi.json`, { cacert })).json.servers, [{ url: verify }]);
  await d.daemon.billing.tick(Date.now() + HOUR);
  for (const [origin, o] of [
    [http, {}],
    [https, { cacert }],
  ] as const) {
    const env = await curl(`${origin}/servers`, { ...o, key: made.json.api_key });
    assert.is(env.status, 402);
    assert.is(env.json.upgrade_url, `${origin}/account/recharge`);
  }
});

test.run();
