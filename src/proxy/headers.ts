// Header hygiene at the proxy boundary. Requests to an app lose their hop-by-hop headers and
// the client's own X-Forwarded-* claims, and gain ours (h1's head writer writes plain requests;
// this file rewrites a WebSocket handshake for http-proxy-3). Responses are rebuilt by h1's
// response reader, which drops the same hop-by-hop set and everything HTTP/2 forbids.

import type { IncomingHttpHeaders } from 'node:http';
import { HOP, SPOOFABLE, connectionTokens } from '../h1/index.js';
import type { RequestInfo } from '../http/index.js';

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
