// Absolute URLs as clients reach this daemon: scheme, host and port. The host is one of the
// daemon's own names ({domain}, api.{domain}, verify.{domain}, <slug>.{domain}); scheme and port
// come from the config (`public.scheme`, `public.port`) or, by default, from the request being
// answered: its listener's scheme, and the port its client named in Host (`api.localhost:28080`
// keeps :28080; a Host without a port means the scheme's default port, as behind a port
// mapping), or the listener's own port when the request named no host at all.

import type { Req } from '../http/index.js';

export interface PublicSettings {
  scheme?: 'http' | 'https';
  port?: number;
}

type Scheme = 'http' | 'https';
const DEFAULT_PORT: Record<Scheme, number> = { http: 80, https: 443 };

/** The port the client reached: the one its Host (or :authority) names, else the listener's. */
function reachedPort(req: Req, scheme: Scheme): number | undefined {
  const raw = req.headers.host ?? (req.headers as Record<string, string | undefined>)[':authority'];
  if (typeof raw === 'string' && raw) {
    const m = /:(\d{1,5})$/.exec(raw.trim());
    const port = m ? Number(m[1]) : DEFAULT_PORT[scheme];
    return port >= 1 && port <= 65535 ? port : undefined;
  }
  return (req.socket as { localPort?: number } | undefined)?.localPort;
}

export class PublicUrls {
  constructor(private readonly settings: PublicSettings = {}) {}

  /** `scheme://host[:port]` of one of the daemon's names, for the request being answered over `scheme`. */
  origin(req: Req, scheme: Scheme, host: string): string {
    const s = this.settings.scheme ?? scheme;
    // a configured scheme other than the request's: the port the client used is not that scheme's
    const port = this.settings.port ?? (s === scheme ? reachedPort(req, scheme) : undefined);
    return port === undefined || port === DEFAULT_PORT[s] ? `${s}://${host}` : `${s}://${host}:${port}`;
  }
}
