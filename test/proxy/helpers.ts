// Shared pieces of the proxy tests: a real Edge (TLS with its generated CA, HTTP/2 + HTTP/1.1,
// plain HTTP) in front of a proxy built with test-chosen sites, raw-socket and node:http clients,
// and small runtimes for servers whose "container" is a process or an in-test server.

import { mkdtempSync, rmSync } from 'node:fs';
import { request, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Edge, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger, type Logger } from '../../src/log/index.js';
import { proxySchema, type ProxyConfig } from '../../src/config/proxy.js';
import type { IdleTracker } from '../../src/presence/index.js';
import { createProxy, type Proxy, type Site, type Sites } from '../../src/proxy/index.js';
import type { Runtime, RuntimeServer, ServerState } from '../../src/runtime/types.js';

export const DOMAIN = 'rbx.test';

export interface TestEdge {
  http: number;
  https: number;
  caFile: string;
  proxy: Proxy;
  logs: Record<string, unknown>[];
  stop(): Promise<void>;
}

const nope: HttpApp = {
  async handle(_req, res) {
    res.writeHead(418);
    res.end();
  },
};

export function sitesOf(list: Site[]): Sites & { list: Site[] } {
  return {
    list,
    lookup: (slug) => list.find((s) => s.slug === slug),
    neverSleep: (id) => list.find((s) => s.id === id)?.neverSleep ?? false,
  };
}

export function testConfig(over: Partial<Record<keyof ProxyConfig, unknown>> = {}): ProxyConfig {
  return proxySchema.parse(over);
}

export async function startEdge(opts: {
  sites: Sites;
  runtime?: Pick<Runtime, 'start' | 'stop' | 'get' | 'list' | 'onThawed'>;
  cfg?: ProxyConfig;
  egress?: (id: string, bytes: number) => void;
  /** An idle tracker of the test's own (started and stopped by the test), e.g. with doze on. */
  presence?: IdleTracker;
  /** The edge's request-head deadline (ms). */
  headerTimeout?: number;
  /** How long an idle HTTP/1.1 connection stays open between requests (ms). */
  keepAliveTimeout?: number;
}): Promise<TestEdge> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-proxy-'));
  const logs: Record<string, unknown>[] = [];
  const log: Logger = createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) });
  const tls = new TlsManager({ domain: DOMAIN, dataDir, log });
  const proxy = createProxy({
    log,
    sites: opts.sites,
    runtime: opts.runtime ?? runningRuntime(opts.sites),
    cfg: opts.cfg ?? testConfig(),
    egress: opts.egress,
    presence: opts.presence,
  });
  const edge = new Edge({
    domain: DOMAIN,
    http: {
      host: '127.0.0.1',
      port: 0,
      redirect: false,
      ...(opts.headerTimeout ? { headerTimeout: opts.headerTimeout } : {}),
      ...(opts.keepAliveTimeout ? { keepAliveTimeout: opts.keepAliveTimeout } : {}),
    },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: nope, verify: nope, proxy },
  });
  try {
    await edge.start();
  } catch (e) {
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  proxy.start();
  return {
    ...edge.ports,
    caFile: tls.caFile!,
    proxy,
    logs,
    async stop() {
      await proxy.stop();
      await edge.stop(500);
      tls.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A runtime whose servers are always running (for sites whose app is an in-test server). */
export function runningRuntime(sites: Sites & { list?: Site[] }): Pick<Runtime, 'start' | 'stop' | 'get' | 'list'> {
  const rec = (s: Site): RuntimeServer => ({
    id: s.id,
    slug: s.slug,
    ip: s.upstream.host,
    uidBase: 0,
    memoryBytes: 0,
    diskBytes: 0,
    rootfs: s.rootfs,
    state: 'running' as ServerState,
  });
  return {
    start: async () => {},
    stop: async () => {},
    get: (id) => {
      const s = sites.list?.find((x) => x.id === id);
      return s ? rec(s) : undefined;
    },
    list: () => (sites.list ?? []).map(rec),
  };
}

export interface Res {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text: string;
}

/** One HTTP/1.1 request through the edge's plain listener; the path is sent exactly as given. */
export function get(
  port: number,
  host: string,
  path: string,
  opts: { method?: string; headers?: Record<string, string>; body?: Buffer | string } = {},
): Promise<Res> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path, method: opts.method ?? 'GET', headers: { host, ...(opts.headers ?? {}) }, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString() });
      });
      res.on('error', reject);
    });
    r.setTimeout(10_000, () => r.destroy(new Error(`request ${path} timed out`)));
    r.on('error', reject);
    r.end(opts.body);
  });
}

/** Sends raw bytes and returns everything the server wrote until it closed (or the timeout). */
export function raw(port: number, text: string, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    let out = '';
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error(`raw request got no close within ${timeoutMs} ms; got: ${out.slice(0, 200)}`));
    }, timeoutMs);
    s.on('data', (d) => (out += d.toString('latin1')));
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(t);
      resolve(out);
    });
    s.write(text);
  });
}
