// Pages for people, seen in a real browser (Debian's headless Chromium) against a real daemon
// with real containers: the apex landing page, the recharge page opened without a key (the key
// typed into the page, sent only in the Authorization header), a sleeping empty server's default
// page, the 502/504 app pages and the 402 paused page — each screenshotted or read as the DOM a
// person sees — and the same URLs answering JSON to agents. The upgrade envelope's message is
// checked against the account's own deadline as billing passes move the clock.
// Screenshots go to a temporary directory, or to $ROOTBOX_SCREENSHOTS (kept) to look at them.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { ensureBuilt, rootboxBin } from '../billing/api.js';
import { sh } from '../runtime/helpers/env.js';
import { decodePng, dumpDom, openTab, visibleText } from './browser.js';
import { curl, shot, until } from './helpers.js';

const HOUR = 3_600_000;
const shots = process.env.ROOTBOX_SCREENSHOTS ?? mkdtempSync(join(tmpdir(), 'rbx-shots-'));
let d: TestDaemon;
let api: string;
/** The server the landing page's curl line made (anonymous account), and one with a run.sh that never listens. */
let A: { id: string; key: string; slug: string };
let B: { id: string; site: string };

const slugOf = (subdomain: string) => subdomain.split('.')[0];
const text = async (url: string) => visibleText(await dumpDom(url));
const state = (id: string) => d.daemon.presence.state(id);

test.before(async () => {
  mkdirSync(shots, { recursive: true });
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    // every anonymous account is out of grant at the first billing pass (only the envelope test runs passes)
    billing: { grantRamGbHours: 0, meterInterval: '1h' },
    proxy: { idleTimeout: '3s', idleCheckInterval: '300ms', wakeTimeout: '3s', appStartGrace: '1s' },
    hosting: { anonServersPerIp: 10, rateLimit: { createsPerIpPerHour: 100 } },
    verify: { x402: { payTo: '0x' + '5a'.repeat(20), facilitatorUrl: 'http://127.0.0.1:9/' } }, // no facilitator: the terms only, nothing leaves the host
  });
  api = `http://api.localhost:${d.http}`;
});
test.after(async () => {
  await d?.stop();
  if (!process.env.ROOTBOX_SCREENSHOTS) rmSync(shots, { recursive: true, force: true });
});

test('the apex shows a person what the host offers and the one curl line that creates a server, and that line works', async () => {
  for (const origin of [`http://localhost:${d.http}`, api]) {
    const seen = await text(`${origin}/`);
    assert.match(seen, 'Root Linux servers on demand');
    assert.match(seen, `curl -X POST ${origin}/create`);
    assert.match(seen, `API description (OpenAPI 3.1): ${origin}/openapi.json`);
    assert.match(seen, `Verification service`);
    assert.match(seen, `http://verify.localhost:${d.http}/v1/info`);
  }
  await shot(shots, 'landing', `${api}/`);

  const agent = await curl(`${api}/`);
  assert.is(agent.status, 200);
  assert.is(agent.type, 'application/json; charset=utf-8');
  assert.is(agent.json.create.curl, `curl -X POST ${api}/create`);
  assert.is(agent.json.openapi, `${api}/openapi.json`);
  assert.is(agent.json.verify.openapi, `http://verify.localhost:${d.http}/openapi.json`);
  const doc = await curl(agent.json.openapi);
  assert.equal(doc.json.servers, [{ url: api }], 'the API description names the port it was reached on');
  const verifyDoc = await curl(agent.json.verify.openapi);
  assert.equal(verifyDoc.json.servers, [{ url: `http://verify.localhost:${d.http}` }]);

  // the line from the page, run as a person would paste it
  const [cmd, ...args] = agent.json.create.curl.split(' ');
  const made = await run(cmd, ['-s', ...args]);
  const server = JSON.parse(made.stdout);
  assert.ok(server.id && server.api_key && server.ssh_private_key, made.stdout.slice(0, 300));
  assert.is(server.ssh, `ssh -i ~/.ssh/${server.id} root@127.0.0.1 -p ${d.daemon.ssh.port}`);
  A = { id: server.id, key: server.api_key, slug: slugOf(server.subdomain) };
});

test('upgrade_url opens in a browser without a key: the page explains the balance and takes the key in the page, never in a URL', async () => {
  const url = `${api}/account/recharge`;
  await shot(shots, 'recharge', url);
  const seen = await text(url);
  for (const s of ['Add credit', 'free grant', 'Your api_key', 'never in a URL', 'Get payment terms', `curl -X POST ${url}`]) assert.match(seen, s);

  const tab = await openTab();
  try {
    await tab.open(url);
    await tab.eval(`document.getElementById('key').value = ${JSON.stringify(A.key)}; document.querySelector('#show button').click(); true`);
    const credits = await until(
      () => tab.eval<string>(`document.getElementById('credits').innerText`),
      (t) => /balance/.test(t),
      'the balance in the page',
    );
    assert.match(credits, /tier\s+anonymous/);
    await tab.eval(`document.getElementById('usd').value = '2'; document.querySelector('#pay button').click(); true`);
    const terms = await until(
      () => tab.eval<string>(`document.getElementById('terms').innerText`),
      (t) => /USDC/.test(t),
      'the payment terms in the page',
    );
    assert.match(terms, /2 USDC \(2000000 units\)/);
    assert.match(terms, '0x' + '5a'.repeat(20));
    assert.ok(tab.requested.filter((u) => u === url).length >= 3, `the page asked its own URL: ${tab.requested.join(' ')}`);
    for (const u of tab.requested) assert.not.match(u, A.key.slice(4), `the key is in a URL: ${u}`);
    const png = await tab.screenshot();
    writeFileSync(join(shots, 'recharge-in-use.png'), png);
    assert.ok(decodePng(png).colours >= 16, 'the page in use shows something');
  } finally {
    await tab.close();
  }

  assert.is((await curl(url, { method: 'POST', body: { usd: 5 } })).status, 401, 'POST stays authenticated');
  const anon = await curl(url);
  assert.is(anon.status, 200);
  assert.is(anon.json.endpoint, url);
  assert.is(anon.json.credits, undefined, 'an agent without a key gets the instructions only');
  assert.is((await curl(url, { key: A.key })).json.credits.tier, 'anonymous');
});

test('a sleeping server with nothing published tells its owner how to publish and what survives a sleep, without waking it', async () => {
  await until(
    () => state(A.id),
    (s) => s === 'sleeping',
    `${A.id} asleep`,
  );
  const site = `http://${A.slug}.localhost:${d.http}/`;
  await shot(shots, 'sleeping-default', site);
  const seen = await text(site);
  assert.match(seen, `${A.slug}.localhost:${d.http} has nothing published yet`);
  assert.match(seen, 'Copy them to /root/www on the server');
  assert.match(seen, 'Write an executable /root/run.sh that starts a server listening on 0.0.0.0:80');
  assert.match(seen, 'Processes you start over SSH stop when it sleeps; only /root/run.sh is started again when the server wakes');
  const agent = await curl(site);
  assert.is(agent.status, 200);
  assert.is(agent.json.published, false);
  assert.match(agent.json.sleep, 'processes started over SSH stop');
  assert.is(state(A.id), 'sleeping', 'the default page does not wake the server');
});

test('an app that does not listen gets a 502 page, and after a sleep a 504 page, for people; the same codes as JSON for agents', async () => {
  const made = await curl(`${api}/create`, { method: 'POST' });
  assert.is(made.status, 200, made.text);
  const { id, subdomain } = made.json;
  const site = `http://${slugOf(subdomain)}.localhost:${d.http}/`;
  B = { id, site };
  const release = d.daemon.presence.hold(id);
  try {
    const w = await sh(d.daemon.runtime, id, `printf '#!/bin/sh\\nexec sleep 1000\\n' > /root/run.sh && chmod +x /root/run.sh`);
    assert.is(w.code, 0, w.err);
    const seen = await text(site);
    assert.match(seen, '502 · the app of this server is not accepting connections on port 80');
    assert.match(seen, 'If this is your server /root/run.sh exists but nothing listens on 0.0.0.0:80; see /var/log/run.sh.log on the server.');
    assert.match(seen, 'Processes started over SSH stop when the server sleeps; only /root/run.sh comes back when it wakes.');
    await shot(shots, 'app-502', site);
    const agent = await curl(site);
    assert.equal([agent.status, agent.json.error], [502, 'app_down']);
  } finally {
    release();
  }
  await until(
    () => state(id),
    (s) => s === 'sleeping',
    `${id} asleep`,
  );
  const seen = await text(site);
  assert.match(seen, '504 · the server did not start answering on port 80 within 3 s of waking');
  assert.match(seen, 'If this is your server Its /root/run.sh must start a server bound to 0.0.0.0:80; see /var/log/run.sh.log on the server.');
  await until(
    () => state(id),
    (s) => s === 'sleeping',
    `${id} asleep again`,
  );
  const agent = await curl(site);
  assert.equal([agent.status, agent.json.error], [504, 'wake_timeout']);
});

test('a server the operator paused says so, without sending its owner to the recharge page', async () => {
  ensureBuilt();
  const r = await run(rootboxBin, ['servers', 'suspend', B.id], { env: { ...process.env, ROOTBOX_DATA_DIR: d.dataDir }, timeoutMs: 120_000 });
  assert.is(r.code, 0, r.stderr);
  const seen = await text(B.site);
  assert.match(seen, "402 · this server is paused by the host's operator");
  assert.match(seen, "If this is your server The owner can ask the host's operator to resume it. Its files are kept.");
  assert.not.match(seen, 'recharge');
  const agent = await curl(B.site);
  assert.equal([agent.status, agent.json.error, agent.json.suspended_by, agent.json.upgrade_url], [402, 'server_suspended', 'operator', undefined]);
});

test("the upgrade envelope counts the time left from the account's own deadline, keeps the port, and says paused once paused", async () => {
  const billing = d.daemon.billing;
  const t0 = Date.now() + HOUR;
  await billing.tick(t0); // every anonymous account is exhausted now: its servers pause at t0 + 48 h
  const envelope = async () => {
    const r = await curl(`${api}/credits`, { key: A.key });
    assert.is(r.status, 402, r.text);
    assert.is(r.json.upgrade_url, `${api}/account/recharge`, 'the port the API was reached on is kept');
    return String(r.json.message);
  };
  assert.match(await envelope(), `Your servers will be paused in 48h unless you add credit (POST ${api}/account/recharge) or verify a phone.`);
  await billing.tick(t0 + 40 * HOUR);
  assert.match(await envelope(), 'will be paused in 8h unless');
  await billing.tick(t0 + 47.5 * HOUR);
  assert.match(await envelope(), 'will be paused in 30 min unless');
  await billing.tick(t0 + 48 * HOUR);
  assert.is(d.daemon.store.servers.get(A.id)?.suspended, true);
  assert.match(await envelope(), `Your servers are paused; add credit (POST ${api}/account/recharge) or verify a phone to start them again.`);

  const site = `http://${A.slug}.localhost:${d.http}/`;
  const seen = await text(site);
  assert.match(seen, '402 · this server is paused because its account ran out of credit');
  assert.match(seen, 'Add credit on the recharge page');
  const dom = await dumpDom(site);
  assert.match(dom, `href="${api}/account/recharge"`);
  await shot(shots, 'paused-402', site);
  const agent = await curl(site);
  assert.equal(
    [agent.status, agent.json.error, agent.json.suspended_by, agent.json.upgrade_url],
    [402, 'server_suspended', 'billing', `${api}/account/recharge`],
  );
});

test.run();
