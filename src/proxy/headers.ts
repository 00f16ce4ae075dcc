// Header hygiene at the proxy boundary. Requests to an app lose their hop-by-hop headers and
// the client's own X-Forwarded-* claims, and gain ours (http1.ts writes plain requests; this
// file rewrites a WebSocket handshake for http-proxy-3). Responses are rebuilt by http1.ts's
// reader, which drops the same hop-by-hop set and everything HTTP/2 forbids.

import type { IncomingHttpHeaders } from 'node:http';
import type { RequestInfo } from '../http/index.js';

/** Hop-by-hop (RFC 9110 §7.6.1) plus the legacy ones proxies also drop. */
export const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
]);
/** Client claims about itself that only we may make. */
const SPOOFABLE = ['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-real-ip', 'forwarded'];
/**
 * What a plain request to an app never carries from the client: hop-by-hop, spoofable, and the
 * two we write ourselves or already answered (Host from the request's authority; Expect, since
 * node's server has sent the 100 Continue).
 */
export const REQUEST_DROP = new Set([...HOP, ...SPOOFABLE, 'host', 'expect']);

export const connectionTokens = (v: string | string[] | undefined): string[] =>
  (Array.isArray(v) ? v.join(',') : (v ?? ''))
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);

/**
 * Rewrites a WebSocket handshake's `headers` in place (http-proxy-3 copies them) for the app:
 * hop-by-hop and spoofable headers go, Connection/Upgrade are set for the upgrade, ours added.
 */
export function prepareUpgradeHeaders(headers: IncomingHttpHeaders, info: RequestInfo): void {
  const named = connectionTokens(headers.connection);
  const wsUpgrade = headers.upgrade;
  const host = headers.host;
  for (const name in headers) {
    if (HOP.has(name) || SPOOFABLE.includes(name) || named.includes(name)) delete headers[name];
  }
  if (wsUpgrade) {
    headers.connection = 'Upgrade';
    headers.upgrade = wsUpgrade;
  }
  headers['x-forwarded-for'] = info.ip;
  headers['x-real-ip'] = info.ip;
  headers['x-forwarded-proto'] = info.scheme;
  if (typeof host === 'string') headers['x-forwarded-host'] = host;
}
