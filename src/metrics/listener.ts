// The metrics listener: a plain HTTP server of its own (never the public edge), by default on
// 127.0.0.1, answering GET /metrics with the Prometheus text exposition. "off" opens nothing.

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { registry, setScrapeSources } from './registry.js';

export interface MetricsListener {
  /** The bound port (0 when off). */
  readonly port: number;
  readonly host: string;
  close(): Promise<void>;
}

/** "host:port" ("[::1]:9464" for IPv6) or "off". */
export function parseListen(listen: string): { host: string; port: number } | undefined {
  if (listen === 'off') return undefined;
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(listen);
  if (!m || Number(m[3]) > 65535) throw new Error(`metrics.listen must be "host:port" or "off", not ${JSON.stringify(listen)}`);
  return { host: m[1] ?? m[2], port: Number(m[3]) };
}

const OFF: MetricsListener = { port: 0, host: '', close: async () => {} };

export async function startMetrics(listen: string): Promise<MetricsListener> {
  const where = parseListen(listen);
  if (!where) return OFF;
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics could not be collected\n'),
    );
  });
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(where.port, where.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  return {
    port: addr.port,
    host: addr.address,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The daemon's metrics part (main.ts), auxiliary: scrape-time gauges read the runtime's servers and
 *  the data dir; a port it cannot bind is logged, never a reason not to serve. close() also drops the sources. */
export async function serveMetrics(d: {
  cfg: { metrics: { listen: string }; dataDir: string };
  runtime: { list(): Iterable<{ state: string }> };
  /** Cluster mode: this host's drain (made after this part: read at scrape). */
  readonly drain?: { progress(): { moved: number; left: number; failed: number; moving: number } | undefined };
  log: { info(msg: string, f?: object): void; error(msg: string, f?: object): void };
}): Promise<MetricsListener> {
  const unscrape = setScrapeSources({ servers: () => d.runtime.list(), dataDir: d.cfg.dataDir, drain: () => d.drain?.progress() });
  const listen = d.cfg.metrics.listen;
  const m = await startMetrics(listen).catch((err: unknown) => {
    d.log.error('metrics listener could not start; serving without it', { listen, err });
    return OFF;
  });
  if (m.port) d.log.info('metrics listening', { host: m.host, port: m.port });
  return { port: m.port, host: m.host, close: () => (unscrape(), m.close()) };
}
