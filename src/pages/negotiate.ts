// Content negotiation for the pages served to people and agents at the same URL: HTML when the
// Accept header asks for text/html at least as much as for JSON, JSON otherwise (curl's */*, no
// Accept, application/json).

import type { Req } from '../http/index.js';

const MAX_ACCEPT = 2048;

export function prefersHtml(accept: string | string[] | undefined): boolean {
  if (typeof accept !== 'string' || !accept) return false;
  let html = 0;
  let json = 0;
  for (const part of accept.slice(0, MAX_ACCEPT).split(',')) {
    const [type, ...params] = part.split(';');
    const t = type.trim().toLowerCase();
    let q = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*([01](?:\.\d{0,3})?)\s*$/i.exec(p);
      if (m) q = Number(m[1]);
    }
    if (t === 'text/html' || t === 'application/xhtml+xml') html = Math.max(html, q);
    else if (t === 'application/json') json = Math.max(json, q);
  }
  return html > 0 && html >= json;
}

export const wantsHtml = (req: Req): boolean => prefersHtml(req.headers.accept);
