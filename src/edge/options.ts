// What the edge is given (server.ts's Edge): the \`http\` and \`https\` config slices (limits left
// out take the config's defaults), the TLS manager, the apps it routes to by Host, servers' own
// domains and the ACME HTTP-01 answers served on the plain listener.

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { configSchema } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { HelloApp, HttpApp, LaneApp, RequestInfo, UpgradeApp } from '../http/index.js';
import type { Aliases } from './target.js';
import type { TlsManager } from './tls.js';

export interface EdgeApps {
  /** The hosting API; it may take WebSocket upgrades on its hosts too (exec over a WebSocket). */
  hosting: HttpApp & { upgrade?(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo): void };
  verify: HttpApp;
  /** Serves <slug>.{domain}; receives WebSocket upgrades for those hosts too. */
  proxy: HttpApp & Partial<UpgradeApp> & Partial<LaneApp> & Partial<HelloApp>;
}

/** The `http` / `https` config slices; limits left out take the config defaults. */
export interface EdgeOptions {
  domain: string;
  http: {
    host: string;
    port: number;
    redirect: boolean;
    maxConnectionsPerAddress?: number;
    maxConnections?: number;
    headerTimeout?: number;
    keepAliveTimeout?: number;
  };
  https: { host: string; port: number; maxStreamResets?: number; streamResetWindow?: number };
  tls: TlsManager;
  /** ACME HTTP-01: the key authorization for a /.well-known/acme-challenge/<token> path, served on the plain listener before Host routing and the redirect; `ip` is the client's (cluster mode bounds the registry reads per source). */
  acmeChallenge?: (path: string | undefined, ip: string) => string | Promise<string | undefined> | undefined;
  apps: EdgeApps;
  /** Servers' own domains, served as their <slug>.{domain}. */
  aliases?: Aliases;
  log: Logger;
}

export const HTTP_DEFAULTS = configSchema.shape.http.parse({});
export const HTTPS_DEFAULTS = configSchema.shape.https.parse({});
