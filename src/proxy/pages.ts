// What a visitor of <slug>.{domain} sees when there is no answer from the server's own content:
// the page of a server with nothing published yet, and the error pages (402 paused, 404, 502,
// 503, 504…). Browsers (Accept: text/html) get the HTML of src/pages; agents and curl get JSON.
// Status, headers and JSON body come from src/http/errors.ts, as for the APIs. Only AppErrors are
// shown (their detail is public); a failure inside the host reaches this page as a generic
// AppError made by the caller after logging it, and every 5xx names the request id.

import { AppError } from '../errors.js';
import { appErrorReply, sendReply, type Req, type Res } from '../http/index.js';
import { errorPageReply, wantsHtml, welcomeReply, type SiteLinks } from '../pages/index.js';

/** The host the visitor named (port included), when it is a plain host name. */
function askedHost(req: Req): string {
  const raw = req.headers.host ?? (req.headers as Record<string, string | undefined>)[':authority'];
  return typeof raw === 'string' && /^[a-z0-9.-]{1,253}(:\d{1,5})?$/i.test(raw) ? raw.toLowerCase() : 'this server';
}

const linksOf = (req: Req, api?: string): SiteLinks => ({ host: askedHost(req), api });

/** The page of a server that has published nothing yet. `api`: origin of the hosting API, for links. */
export function sendWelcome(req: Req, res: Res, slug: string, api?: string): void {
  sendReply(res, welcomeReply(slug, linksOf(req, api), wantsHtml(req)), req.method === 'HEAD');
}

/** Sends an AppError as a page (HTML for browsers, JSON otherwise). */
export function sendErrorPage(req: Req, res: Res, err: AppError, requestId: string, api?: string): void {
  const reply = appErrorReply(err, requestId);
  const headOnly = req.method === 'HEAD';
  const headers = { 'cache-control': 'no-store', vary: 'Accept', ...reply.headers, 'x-request-id': requestId };
  if (!wantsHtml(req)) {
    sendReply(res, { status: reply.status, headers, body: reply.body }, headOnly);
    return;
  }
  const hint = typeof err.extra?.hint === 'string' ? err.extra.hint : undefined;
  const retryAfter = Number(reply.headers?.['retry-after']) || undefined;
  const suspendedBy = typeof err.extra?.suspended_by === 'string' ? err.extra.suspended_by : undefined;
  const page = errorPageReply(
    { status: reply.status, code: err.code, detail: err.detail, hint, requestId, retryAfter, suspendedBy },
    linksOf(req, api),
    headers,
  );
  sendReply(res, page, headOnly);
}
