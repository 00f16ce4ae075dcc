// What a visitor of <slug>.{domain} sees when there is no answer from the server's own content:
// the friendly page of a server with nothing published, and the error pages (404, 502, 503,
// 504…). Browsers get HTML; agents and curl (no text/html in Accept) get {error, detail} JSON.
// Status, headers and JSON body come from src/http/errors.ts, as for the APIs. Only AppErrors are shown
// (their detail is public); a failure inside the host reaches this page as a generic AppError made
// by the caller after logging it, and every 5xx names the request id.

import { AppError } from '../errors.js';
import { appErrorReply, sendReply, type Req, type Res } from '../http/index.js';

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function html(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${esc(title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}code{background:#f2f2f2;padding:.1rem .3rem;border-radius:3px}p.small{color:#666;font-size:.9rem}</style>
</head><body>${body}</body></html>
`;
}

const wantsHtml = (req: Req) => /text\/html/i.test(String(req.headers.accept ?? ''));

/** The page of a server that has published nothing yet. */
export function sendWelcome(req: Req, res: Res, slug: string): void {
  const headOnly = req.method === 'HEAD';
  const headers = { 'cache-control': 'no-store' };
  if (!wantsHtml(req)) {
    sendReply(res, { status: 200, headers, body: { server: slug, published: false, detail: 'nothing is published here yet: put files in /root/www, or make /root/run.sh start a server on 0.0.0.0:80' } }, headOnly);
    return;
  }
  const body = html(`${slug} is up`, `<h1>${esc(slug)} is up</h1>
<p>This server has not published anything yet. Two ways to put a site here:</p>
<ol><li>Static files: copy them to <code>/root/www</code> (an <code>index.html</code> is served at <code>/</code>). They are served at once, even while the server sleeps.</li>
<li>Your own app: write an executable <code>/root/run.sh</code> that starts a server listening on <code>0.0.0.0:80</code>. It starts within about a second and this address switches to it.</li></ol>
<p class="small">Served by rootbox.</p>`);
  sendReply(res, { status: 200, headers: { ...headers, 'content-type': 'text/html; charset=utf-8' }, body }, headOnly);
}

/** Sends an AppError as a page (HTML for browsers, JSON otherwise). */
export function sendErrorPage(req: Req, res: Res, err: AppError, requestId: string): void {
  const reply = appErrorReply(err, requestId);
  const status = reply.status;
  const headOnly = req.method === 'HEAD';
  const headers = { 'cache-control': 'no-store', ...reply.headers, 'x-request-id': requestId };
  if (!wantsHtml(req)) {
    sendReply(res, { status, headers, body: reply.body }, headOnly);
    return;
  }
  const hint = typeof err.extra?.hint === 'string' ? `<p>${esc(err.extra.hint)}</p>` : '';
  const body = html(`${status} ${err.code}`, `<h1>${status}: ${esc(err.detail)}</h1>${hint}
<p class="small">error <code>${esc(err.code)}</code> · request <code>${esc(requestId)}</code> · rootbox</p>`);
  sendReply(res, { status, headers: { ...headers, 'content-type': 'text/html; charset=utf-8' }, body }, headOnly);
}
