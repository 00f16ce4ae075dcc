// The verification host's front page (verify.{domain}/) for people: what the service does, its
// tiers and prices, how to pay with x402 and where the machine-readable descriptions are. Agents
// get the same facts as JSON from the same URL (verify/discovery.ts verifyHome).

import type { Reply } from '../http/index.js';
import { markup } from './html.js';
import { pageReply } from './layout.js';

export interface VerifyHomeFacts {
  service: string;
  about: string;
  tiers: { tier: string; passes: number; price: string; endpoint: string }[];
  payment: { network: string | null; asset: string | null; available: boolean; steps: string[] };
  request: { artifact: string; rubric: string };
  links: { info: string; openapi: string; manifest: string; stats: string };
  not_configured: string[];
}

export function verifyHomeReply(f: VerifyHomeFacts, host: string): Reply {
  const rows = f.tiers.map(
    (t) => markup`<tr><td><b>${t.tier}</b></td><td>${t.passes} passes</td><td>${t.price}</td><td><code>POST /v1/verify/${t.tier}</code></td></tr>`,
  );
  const state = f.payment.available
    ? markup`<p>Payments are taken now, in USDC on ${f.payment.network ?? ''}.</p>`
    : markup`<div class="card note">Payments are not available on this host right now${
        f.not_configured.length ? markup` (not configured: ${f.not_configured.join(', ')})` : ''
      }: a paid call answers 503 and nothing is charged.</div>`;
  const main = markup`<h1>Verification: independent AI passes, one verdict</h1>
    <p class="lead">${f.about}</p>
    <h2>Tiers and prices</h2>
    <table><tr><th>tier</th><th>passes</th><th>price per call</th><th>endpoint</th></tr>${rows}</table>
    <p class="muted">Body: <code>{"artifact": "…", "rubric": "…"}</code> — artifact ${f.request.artifact}; rubric ${f.request.rubric}.</p>
    <h2>How to pay with x402</h2>
    ${state}
    <ol>${f.payment.steps.map((s) => markup`<li>${s}</li>`)}</ol>
    <p>No account and no API key: the payment is the credential. A failed verification is not settled, so nothing is charged for it.</p>
    <h2>For programs and agents</h2>
    <ul>
      <li>Service card (tiers, prices, payment terms): <a href="${f.links.info}">${f.links.info}</a></li>
      <li>API description (OpenAPI 3.1): <a href="${f.links.openapi}">${f.links.openapi}</a></li>
      <li>x402 manifest of the paid resources: <a href="${f.links.manifest}">${f.links.manifest}</a></li>
      <li>This page as JSON: ask with <code>Accept: application/json</code>.</li>
    </ul>`;
  return pageReply(200, { title: `${f.service} verification · ${host}`, where: host, main, footer: markup`Served by rootbox on ${host}` });
}
