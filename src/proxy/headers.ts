// Header hygiene at the proxy boundary. Requests to an app lose their hop-by-hop headers and
// the client's own X-Forwarded-* claims, and gain ours. Responses from an app are rebuilt from
// scratch: hop-by-hop headers, the headers HTTP/2 forbids (which would make node:http2 throw)
// and anything node would refuse to write are dropped, so a hostile upstream cannot crash us.

import type { IncomingHttpHeaders } from 'node:http';
import type { RequestInfo } from '../http/index.js';

/** Hop-by-hop (RFC 9110 §7.6.1) plus the legacy ones proxies also drop. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings']);
/** Client claims about itself that only we may make. */
const SPOOFABLE = new Set(['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-real-ip', 'forwarded']);

const connectionTokens = (v: string | string[] | undefined): string[] =>
  (Array.isArray(v) ? v.join(',') : v ?? '')
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);

/**
 * Rewrites `headers` (the incoming request's, mutated in place: http-proxy copies them) for the
 * upstream. `upgrade` keeps Connection/Upgrade for a WebSocket handshake. `bodyUnframed` marks
 * an HTTP/2 request whose body has no length: it is sent chunked.
 */
export function prepareRequestHeaders(headers: IncomingHttpHeaders, info: RequestInfo, opts: { upgrade: boolean; bodyUnframed: boolean }): void {
  const named = connectionTokens(headers.connection);
  const chunked = /(^|,)\s*chunked\s*$/i.test(String(headers['transfer-encoding'] ?? ''));
  const wsUpgrade = opts.upgrade ? headers.upgrade : undefined;
  const host = headers[':authority'] ?? headers.host;
  for (const name in headers) {
    if (HOP.has(name) || SPOOFABLE.has(name) || named.includes(name)) delete headers[name];
  }
  // The request body framing survives (node re-encodes chunked bodies itself).
  if (chunked || opts.bodyUnframed) headers['transfer-encoding'] = 'chunked';
  if (wsUpgrade) {
    headers.connection = 'Upgrade';
    headers.upgrade = wsUpgrade;
  }
  headers['x-forwarded-for'] = info.ip;
  headers['x-real-ip'] = info.ip;
  headers['x-forwarded-proto'] = info.scheme;
  if (typeof host === 'string') headers['x-forwarded-host'] = host;
}

/**
 * The headers of an upstream response that are safe to send on, for HTTP/1.1 and HTTP/2 alike:
 * node's parsed view (names lowercased, repeats joined, set-cookie kept as a list) minus the
 * hop-by-hop headers, the ones Connection names and anything HTTP/2 forbids. Values node would
 * still refuse make writeHead throw; the caller turns that into a 502.
 */
export function cleanResponseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const named = headers.connection ? connectionTokens(headers.connection) : undefined;
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP.has(name) || name.charCodeAt(0) === 58 /* : */ || (named && named.includes(name))) continue;
    out[name] = value;
  }
  return out;
}
