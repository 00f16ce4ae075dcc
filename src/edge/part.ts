// The daemon's two edge parts (main.ts): the TLS certificates (before ACME installs its own into
// them; in cluster mode the default ones under the cluster's edge CA: clusterca.ts) and the
// listeners, which come last since they route to every app.

import type { Config } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { HttpApp } from '../http/index.js';
import { Edge, type EdgeApps } from './server.js';
import type { Aliases } from './target.js';
import { TlsManager } from './tls.js';
import { followClusterCa, type EdgeCaSource } from './clusterca.js';

export async function startTls(d: {
  cfg: Readonly<Config>;
  log: Logger;
  /** Cluster mode: the registry's edge CA, and whether the registry answered this host's start. */
  registry?: { edgeCa: EdgeCaSource; up: boolean };
}): Promise<TlsManager> {
  const { cfg, log } = d;
  const tls = new TlsManager({ domain: cfg.domain, dataDir: cfg.dataDir, cert: cfg.https.cert, key: cfg.https.key, log });
  // the embedded defaults only: the operator's certificate and ACME's are theirs
  if (d.registry && tls.caFile && !cfg.https.acme.directory)
    await followClusterCa(tls, d.registry.edgeCa, { up: d.registry.up, retryMs: cfg.cluster.certificatePoll, log: log.child({ part: 'tls' }) });
  return tls;
}

export interface EdgePartDeps {
  cfg: Readonly<Config>;
  log: Logger;
  tls: TlsManager;
  acme: { http01: { answer(path: string | undefined, ip: string): string | Promise<string | undefined> | undefined } };
  hosting: { handle: HttpApp['handle']; upgrade: NonNullable<EdgeApps['hosting']['upgrade']>; core: { domains: { slugOf: Aliases } } };
  verify: EdgeApps['verify'];
  proxy: EdgeApps['proxy'];
  /** Cluster mode: every host's active domains (the channel's), not only this host's. */
  aliases?: Aliases;
}

export async function startEdge(d: EdgePartDeps): Promise<Edge> {
  const edge = new Edge({
    domain: d.cfg.domain,
    http: d.cfg.http,
    https: d.cfg.https,
    tls: d.tls,
    acmeChallenge: (path, ip) => d.acme.http01.answer(path, ip),
    log: d.log,
    aliases: d.aliases ?? d.hosting.core.domains.slugOf,
    apps: { hosting: { handle: (req, res, info) => d.hosting.handle(req, res, info), upgrade: d.hosting.upgrade }, verify: d.verify, proxy: d.proxy },
  });
  await edge.start();
  if (d.tls.caFile) d.log.info('local CA for HTTPS clients', { ca: d.tls.caFile, hint: firstCall(d.cfg, edge.ports.https, d.tls.caFile) });
  return edge;
}

/** The first request to try, at the address and port the edge listens on (a port given as 0 is the one it got). */
export function firstCall(cfg: Pick<Config, 'domain' | 'https'>, port: number, caFile: string): string {
  const host = cfg.https.host;
  const wildcard = !host || host === '0.0.0.0' || host === '::';
  // a name under `localhost` resolves to loopback: a daemon listening on another address is reached by --resolve
  const local = cfg.domain === 'localhost' || cfg.domain.endsWith('.localhost');
  const resolve =
    !wildcard && local && host !== '127.0.0.1' && host !== '::1' ? ` --resolve api.${cfg.domain}:${port}:${host.includes(':') ? `[${host}]` : host}` : '';
  return `curl --cacert ${caFile}${resolve} https://api.${cfg.domain}${port === 443 ? '' : `:${port}`}/healthz`;
}
