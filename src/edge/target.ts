// Which host a request names, checked the way RFC 9112 §3.2 asks, and its target made origin-form.
// - More than one Host header is a 400 (`duplicate_host`); so is an HTTP/2 Host that names
//   another host than its :authority (`conflicting_host`).
// - An absolute-form target (`GET http://api.example.com/x HTTP/1.1`) names the host itself and
//   wins over any Host header (§3.2.2). The request is rewritten in place — url to origin-form,
//   its Host header (raw list and parsed object) to the target's authority — so the apps, static
//   files and what the proxy forwards all see one consistent request.
// - An HTTP/2 :path that is not origin-form (or `*`) is a 400 (`invalid_target`).
// - A server's own domain is routed as its <slug>.{domain} (aliased()).

import { AppError } from '../errors.js';
import type { Req } from '../http/index.js';
import type { Target } from './dispatch.js';

export interface Named {
  /** The Host value as sent (or the absolute target's authority); undefined when absent. */
  host: string | undefined;
  /** The client's X-Request-Id, if any. */
  rid: string | string[] | undefined;
}

const ABSOLUTE = /^https?:\/\/([^/?#@]+)((?:[/?][^#]*)?)$/i;

const duplicate = () => AppError.of('duplicate_host', 'the request has more than one Host header');
const badTarget = () => AppError.of('invalid_target', 'the request target must be a path starting with / or an absolute http(s) URL with a host');

/** Reads (and normalises) host and request id of a request; throws the 400s above. */
export function named(req: Req): Named {
  const url = req.url ?? '/';
  if (req.httpVersionMajor >= 2) {
    const h = req.headers;
    const authority = h[':authority'] as string | undefined;
    const host = h.host as string | string[] | undefined;
    if (Array.isArray(host)) throw duplicate();
    if (authority !== undefined && host !== undefined && host.toLowerCase() !== authority.toLowerCase()) {
      throw AppError.of('conflicting_host', 'the request names one host in :authority and another in Host');
    }
    if (url.charCodeAt(0) !== 47 /* / */ && !(url === '*' && req.method === 'OPTIONS')) throw badTarget();
    return { host: authority ?? host, rid: h['x-request-id'] };
  }
  // HTTP/1.1: from the raw list (node builds req.headers only when asked)
  const raw = req.rawHeaders;
  let at = -1;
  let rid: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i];
    if (n.length === 4 && n.toLowerCase() === 'host') {
      if (at >= 0) throw duplicate();
      at = i;
    } else if (n.length === 12 && rid === undefined && n.toLowerCase() === 'x-request-id') rid = raw[i + 1];
  }
  if (url.charCodeAt(0) === 47 || url === '*') return { host: at >= 0 ? raw[at + 1] : undefined, rid };
  const m = ABSOLUTE.exec(url);
  if (!m) throw badTarget();
  const authority = m[1];
  req.url = m[2].charCodeAt(0) === 47 ? m[2] : `/${m[2]}`;
  if (at >= 0) raw[at + 1] = authority;
  else raw.push('Host', authority);
  req.headers.host = authority;
  return { host: authority, rid };
}

/** A server's own domain (hosting.domains): its active host name → the server's slug. */
export type Aliases = (host: string) => string | undefined;

/**
 * A host no rule of the edge knows may be a server's own domain: then it is served exactly like
 * `<slug>.{domain}` (info.host becomes that name, so the proxy finds the server by it; the Host
 * header the app sees stays the one the client sent; info.alias keeps the name, which a host
 * forwarding the request names to the owner). One map lookup, only for unknown hosts.
 */
export function aliased(target: Target, info: { host: string; alias?: string }, domain: string, aliases: Aliases | undefined): Target {
  if (target.app !== 'none' || !aliases) return target;
  const slug = aliases(info.host);
  if (slug === undefined) return target;
  info.alias = info.host;
  info.host = `${slug}.${domain}`;
  return { app: 'proxy', slug };
}
