// Absolute URLs as clients reach this daemon: scheme, host and port. The host is one of the
// daemon's own names ({domain}, api.{domain}, verify.{domain}, <slug>.{domain}); scheme and port
// come from the config (`public.scheme`, `public.port`) or, by default, from the listener that
// serves the request being answered — so a daemon on http://api.localhost:28080 writes :28080.

import type { Req } from '../http/index.js';

export interface PublicSettings {
  scheme?: 'http' | 'https';
  port?: number;
}

type Scheme = 'http' | 'https';
const DEFAULT_PORT: Record<Scheme, number> = { http: 80, https: 443 };

/** The local port of the connection a request came in on (the listener's bound port). */
function listenerPort(req: Req): number | undefined {
  const port = (req.socket as { localPort?: number } | undefined)?.localPort;
  if (port) return port;
  // no socket address (a closed connection): the port the client named in its Host
  const raw = req.headers.host ?? (req.headers as Record<string, string | undefined>)[':authority'];
  const m = typeof raw === 'string' ? /:(\d{1,5})$/.exec(raw) : null;
  return m ? Number(m[1]) : undefined;
}

export class PublicUrls {
  constructor(private readonly settings: PublicSettings = {}) {}

  /** `scheme://host[:port]` of one of the daemon's names, for the request being answered over `scheme`. */
  origin(req: Req, scheme: Scheme, host: string): string {
    const s = this.settings.scheme ?? scheme;
    // a configured scheme other than the request's has no listener here to take a port from
    const port = this.settings.port ?? (s === scheme ? listenerPort(req) : undefined);
    return port === undefined || port === DEFAULT_PORT[s] ? `${s}://${host}` : `${s}://${host}:${port}`;
  }
}

