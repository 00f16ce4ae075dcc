// The recharge page (GET api.{domain}/account/recharge in a browser): what the balance is for and
// how to add credit, with or without a key. The api_key is typed into the page and sent only in
// the Authorization header of the page's own requests to this API — never in a URL: the inputs
// have no name, the forms no action, and the CSP forbids submitting them anywhere.

import type { Reply } from '../http/index.js';
import { markup } from './html.js';
import { pageReply } from './layout.js';

export interface RechargeFacts {
  /** The absolute URL of POST /account/recharge. */
  endpoint: string;
  /** Origin of the hosting API, for links. */
  api: string;
  paymentsConfigured: boolean;
  maxUsd: number;
  prices: { ramUsdPerGbHour: number; diskUsdPerGbMonth: number; egressUsdPerGb: number };
  /** Known when the request carried the api_key. */
  credits?: { tier: string; balance_usd: number; ram_gb_hours_left: number; egress_gb_left: number };
  /** The caller's phone is verified: no advice to verify one. */
  verified?: boolean;
}

// The page's script: reads the key from the input, calls this same path with it in the
// Authorization header, and shows the answers with textContent (never as HTML).
const SCRIPT = `(function () {
  var $ = function (id) { return document.getElementById(id); };
  function call(method, body) {
    var headers = { accept: 'application/json', authorization: 'Bearer ' + $('key').value.trim() };
    if (body) headers['content-type'] = 'application/json';
    return fetch(location.pathname, { method: method, headers: headers, body: body ? JSON.stringify(body) : undefined, credentials: 'omit', cache: 'no-store' })
      .then(function (r) { return r.json().catch(function () { return {}; }).then(function (j) { return { status: r.status, json: j }; }); });
  }
  function rows(out, title, pairs) {
    out.textContent = '';
    var h = document.createElement('p'); h.textContent = title; out.appendChild(h);
    var t = document.createElement('table');
    pairs.forEach(function (p) {
      var tr = t.insertRow(); var th = document.createElement('th'); th.textContent = p[0]; tr.appendChild(th);
      tr.insertCell().textContent = String(p[1]);
    });
    out.appendChild(t);
  }
  function say(out, text) { out.textContent = ''; var p = document.createElement('p'); p.textContent = text; out.appendChild(p); }
  function need(out) { if ($('key').value.trim()) return true; say(out, 'Enter your api_key first (the one POST /create gave you).'); return false; }
  $('show').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var out = $('credits');
    if (!need(out)) return;
    say(out, 'Asking…');
    call('GET').then(function (r) {
      var c = r.json.credits;
      if (r.status !== 200 || !c) return say(out, (r.json.detail || 'the API answered ' + r.status));
      rows(out, 'Your account:', [['tier', c.tier], ['balance', '$' + c.balance_usd], ['RAM left in the free grant', c.ram_gb_hours_left + ' GB-hours'], ['traffic left in the free grant', c.egress_gb_left + ' GB']]);
    }, function () { say(out, 'The API could not be reached.'); });
  });
  $('pay').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var out = $('terms');
    if (!need(out)) return;
    var usd = Number($('usd').value);
    say(out, 'Asking…');
    call('POST', { usd: usd }).then(function (r) {
      var a = r.json.accepts && r.json.accepts[0];
      if (r.status !== 402 || !a) return say(out, (r.json.detail || 'the API answered ' + r.status));
      rows(out, 'Pay these x402 terms, then send the same request again with the payment in the X-PAYMENT header:', [
        ['amount', (Number(a.amount) / 1e6) + ' USDC (' + a.amount + ' units)'], ['network', a.network], ['pay to', a.payTo], ['asset', a.asset], ['valid for', a.maxTimeoutSeconds + ' s']]);
    }, function () { say(out, 'The API could not be reached.'); });
  });
})();`;

export function rechargeReply(f: RechargeFacts): Reply {
  const c = f.credits;
  const known = c
    ? markup`<table>
        <tr>
          <th>tier</th>
          <td>${c.tier}</td>
        </tr>
        <tr>
          <th>balance</th>
          <td>$${c.balance_usd}</td>
        </tr>
        <tr>
          <th>RAM left in the free grant</th>
          <td>${c.ram_gb_hours_left} GB-hours</td>
        </tr>
        <tr>
          <th>traffic left in the free grant</th>
          <td>${c.egress_gb_left} GB</td>
        </tr>
      </table>`
    : '';
  const main = markup`<h1>Add credit</h1>
    <p class="lead">
      Servers are paid from a free grant first (RAM hours and traffic), then from your balance in USD. When both are used up, the API answers
      <code>402</code> and your servers are paused 48 hours later; adding credit starts them again and raises their limits.
    </p>
    <p>
      Prices: $${f.prices.ramUsdPerGbHour} per GB-hour of RAM while awake, $${f.prices.diskUsdPerGbMonth} per GB-month of disk, $${f.prices.egressUsdPerGb} per
      GB of traffic.
    </p>
    ${
      f.paymentsConfigured
        ? ''
        : markup`<div class="card note"><p>Payments are not configured on this host yet: ask its operator, or verify a phone to raise your free grant.</p></div>`
    }
    <div class="card">
      <b>Your balance</b>${known}
      <form id="show" autocomplete="off">
        <label for="key">Your api_key</label>
        <input id="key" type="password" placeholder="rbx_…" spellcheck="false" autocomplete="off" />
        <p class="muted">It stays in this page: it is sent only in the Authorization header of this page's requests to the API, never in a URL.</p>
        <button type="submit">Show my balance</button>
      </form>
      <div id="credits" class="out" aria-live="polite"></div>
    </div>
    <div class="card">
      <b>Add credit with x402 (USDC)</b>
      <form id="pay" autocomplete="off">
        <label for="usd">Amount in USD (0.01 to ${f.maxUsd})</label>
        <input id="usd" type="number" min="0.01" max="${f.maxUsd}" step="0.01" value="5" />
        <button type="submit">Get payment terms</button>
      </form>
      <div id="terms" class="out" aria-live="polite"></div>
      <p>
        From a program: ask for the terms, pay them with an x402 client, and send the same request again with the <code>X-PAYMENT</code> header. The balance is
        credited once per payment.
      </p>
      <pre><code>curl -X POST ${f.endpoint} \\
  -H 'authorization: Bearer rbx_…' -H 'content-type: application/json' \\
  -d '{"usd": 5}'</code></pre>
    </div>
    ${
      f.verified
        ? ''
        : markup`<div class="card">
            <b>Or verify a phone</b>
            <p>
              A verified phone raises the free grant: <code>POST ${f.api}/create</code> with <code>{"phone": "+…"}</code>, then again with the texted
              <code>code</code>.
            </p>
          </div>`
    }`;
  return pageReply(200, {
    title: 'Add credit · rootbox',
    where: new URL(f.api).host,
    main,
    script: SCRIPT,
    footer: markup`Served by rootbox · <a href="${f.api}/">what this host offers</a>`,
  });
}
