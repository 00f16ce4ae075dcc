// The pieces of the pages without a daemon: escaping by construction, content negotiation on
// Accept, absolute URLs from config or from the request, the CSP that lets exactly the page's own
// script and style run, and the upgrade envelope's message for each situation of an account.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { upgradeEnvelope } from '../../src/billing/index.js';
import type { Req } from '../../src/http/index.js';
import { errorPageReply, markup, prefersHtml, PublicUrls, rechargeReply, trusted, welcomeReply } from '../../src/pages/index.js';

const req = (host: string | undefined, localPort = 8080) => ({ headers: host === undefined ? {} : { host }, socket: { localPort } }) as unknown as Req;
const HOUR = 3_600_000;

test('markup escapes every interpolated string, keeps fragments and constants marked trusted', () => {
  const evil = `<script>alert("x")</script>&'`;
  assert.is(
    markup`<p title="${evil}">${evil}</p>`.value,
    '<p title="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;</p>',
  );
  assert.is(markup`<ul>${['a<', markup`<li>b</li>`]}</ul>`.value, '<ul>a&lt;<li>b</li></ul>');
  assert.is(markup`${trusted('<b>')}${null}${undefined}${false}${0}`.value, '<b>0');
});

test('a browser gets HTML; curl, agents and anything preferring JSON get JSON', () => {
  const browser = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8';
  assert.ok(prefersHtml(browser));
  assert.ok(prefersHtml('text/html'));
  for (const a of [undefined, '', '*/*', 'application/json', 'text/html;q=0', 'application/json, text/html;q=0.5', 'text/plain', ['text/html']]) {
    assert.not.ok(prefersHtml(a as string), String(a));
  }
});

test('absolute URLs keep the port the client named, drop default ports, and follow public.scheme/port when configured', () => {
  const def = new PublicUrls();
  assert.is(def.origin(req('api.localhost:28080'), 'http', 'api.localhost'), 'http://api.localhost:28080');
  assert.is(def.origin(req('api.localhost'), 'http', 'api.localhost'), 'http://api.localhost', 'no port named: the default one');
  assert.is(def.origin(req('api.example.com:443'), 'https', 'api.example.com'), 'https://api.example.com');
  assert.is(def.origin(req('x.example.com:8443'), 'https', 'verify.example.com'), 'https://verify.example.com:8443');
  assert.is(def.origin(req(undefined, 28081), 'http', 'api.localhost'), 'http://api.localhost:28081', 'no Host: the listener port');
  const conf = new PublicUrls({ scheme: 'https', port: 443 });
  assert.is(conf.origin(req('api.localhost:28080'), 'http', 'api.localhost'), 'https://api.localhost');
  assert.is(new PublicUrls({ port: 9443 }).origin(req('api.localhost:28080'), 'https', 'api.localhost'), 'https://api.localhost:9443');
  assert.is(
    new PublicUrls({ scheme: 'https' }).origin(req('api.localhost:28080'), 'http', 'api.localhost'),
    'https://api.localhost',
    'another scheme: not the port of this one',
  );
});

test('pages allow exactly their own inline script and stylesheet, and escape what they show', () => {
  const facts = {
    endpoint: 'http://api.x:1/account/recharge',
    api: 'http://api.x:1',
    paymentsConfigured: true,
    maxUsd: 10,
    prices: { ramUsdPerGbHour: 1, diskUsdPerGbMonth: 1, egressUsdPerGb: 1 },
  };
  const page = rechargeReply(facts);
  const body = String(page.body);
  const csp = String(page.headers!['content-security-policy']);
  const hash = (s: string) => `'sha256-${createHash('sha256').update(s).digest('base64')}'`;
  const script = /<script>([\s\S]*?)<\/script>/.exec(body)![1];
  const style = /<style>([\s\S]*?)<\/style>/.exec(body)![1];
  assert.match(csp, `script-src ${hash(script)}`);
  assert.match(csp, `style-src ${hash(style)}`);
  assert.match(csp, "default-src 'none'");
  assert.match(csp, "form-action 'none'");
  assert.not.match(body, /<input[^>]*\bname=/, 'no input is ever submitted with a name');
  assert.match(body, 'Or verify a phone');
  assert.not.match(String(rechargeReply({ ...facts, verified: true }).body), 'Or verify a phone');

  const err = errorPageReply({ status: 404, code: 'not_found', detail: 'nothing at /<img src=x onerror=alert(1)>', requestId: 'r1' }, { host: 'a.b' }, {});
  assert.not.match(String(err.body), '<img');
  assert.match(String(err.body), 'nothing at /&lt;img src=x onerror=alert(1)&gt;');
  assert.is(err.headers!['content-type'], 'text/html; charset=utf-8');
  const welcome = welcomeReply('s', { host: 's.x' }, false);
  assert.is((welcome.body as { published: boolean }).published, false);
});

test("the envelope's message: time left to the account's own deadline, within a minute once past, paused once paused, no phone advice to a verified account", () => {
  const now = 1_000 * HOUR;
  const msg = (f: Partial<Parameters<typeof upgradeEnvelope>[1]>) =>
    upgradeEnvelope('https://api.x', { now, suspendAfterMs: 48 * HOUR, paused: false, verified: false, ...f }).message;
  assert.match(msg({}), 'will be paused in 48h unless you add credit (POST https://api.x/account/recharge) or verify a phone.');
  assert.match(msg({ pausesAt: now + 48 * HOUR }), 'paused in 48h');
  assert.match(msg({ pausesAt: now + 5 * HOUR + 10 * 60_000 }), 'paused in 5h');
  assert.match(msg({ pausesAt: now + 20 * 60_000 }), 'paused in 20 min');
  assert.match(msg({ pausesAt: now - HOUR }), 'paused within a minute unless');
  assert.match(
    msg({ paused: true, pausesAt: now - HOUR }),
    'Your servers are paused; add credit (POST https://api.x/account/recharge) or verify a phone to start them again.',
  );
  assert.not.match(msg({ verified: true }), 'phone');
  assert.not.match(msg({ verified: true, paused: true }), 'phone');
  assert.is(upgradeEnvelope('https://api.x', { now, suspendAfterMs: 1, paused: false, verified: false }).upgrade_url, 'https://api.x/account/recharge');
});

test.run();
