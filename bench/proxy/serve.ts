// Benchmark helper process: the real Edge + proxy (as the daemon builds them) in front of one
// app at the host:port given in argv, published as bench.rbx.test (its rootfs has an executable
// /root/run.sh, so requests are forwarded). Prints {"http": port} on stdout when listening.

import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { proxySchema } from '../../src/config/proxy.js';
import { Edge, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy, type Site } from '../../src/proxy/index.js';
import type { RuntimeServer } from '../../src/runtime/types.js';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-proxy-'));
const rootfs = join(dir, 'rootfs');
mkdirSync(join(rootfs, 'root'), { recursive: true });
writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\n');
chmodSync(join(rootfs, 'root/run.sh'), 0o755);

const log = createLogger({ level: 'error' });
const site: Site = { id: 'srv_bench', slug: 'bench', rootfs, upstream: { host, port }, neverSleep: true, suspended: false };
const rec: RuntimeServer = { id: site.id, slug: 'bench', ip: host, uidBase: 0, memoryBytes: 0, diskBytes: 0, rootfs, state: 'running' };
const proxy = createProxy({
  log,
  cfg: proxySchema.parse({}),
  sites: { lookup: (s) => (s === 'bench' ? site : undefined), neverSleep: () => true },
  runtime: { start: async () => {}, stop: async () => {}, get: (id) => (id === rec.id ? rec : undefined), list: () => [rec] },
});
const nope: HttpApp = { handle: async (_q, r) => void r.writeHead(404).end() };
const tls = new TlsManager({ domain: 'rbx.test', dataDir: dir, log });
const edge = new Edge({ domain: 'rbx.test', http: { host: '127.0.0.1', port: 0, redirect: false }, https: { host: '127.0.0.1', port: 0 }, tls, log, apps: { hosting: nope, verify: nope, proxy } });
await edge.start();
process.stdout.write(JSON.stringify(edge.ports) + "\n");
const stop = async () => {
  await edge.stop(200);
  await proxy.stop();
  tls.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
