// Benchmark helper process: the real Edge + proxy (as the daemon builds them: server records
// looked up in a real LMDB store per request) in front of one app at the host:port given in
// argv, published as bench.rbx.test (its rootfs has an executable /root/run.sh, so requests are
// forwarded). Prints {"http": port, "https": port} on stdout when listening.

import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { proxySchema } from '../../src/config/proxy.js';
import { Edge, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy } from '../../src/proxy/index.js';
import type { RuntimeServer } from '../../src/runtime/types.js';
import { openStore } from '../../src/store/index.js';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-proxy-'));
const rootfs = join(dir, 'rootfs');
mkdirSync(join(rootfs, 'root'), { recursive: true });
writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\n');
chmodSync(join(rootfs, 'root/run.sh'), 0o755);

const log = createLogger({ level: 'error' });
const store = openStore(join(dir, 'data'));
store.servers.insert({
  id: 'srv_bench',
  accountId: 'acc_bench',
  slug: 'bench',
  sshPublicKey: '',
  keyFingerprint: 'bench',
  memoryBytes: 0,
  diskBytes: 0,
  neverSleep: true,
  suspended: false,
  flag: null,
  createdAt: 0,
});
const rec: RuntimeServer = { id: 'srv_bench', slug: 'bench', ip: host, uidBase: 0, memoryBytes: 0, diskBytes: 0, rootfs, state: 'running' };
const proxy = createProxy({
  log,
  cfg: proxySchema.parse({}),
  servers: store.servers,
  runtime: { start: async () => {}, stop: async () => {}, get: (id) => (id === rec.id ? rec : undefined), list: () => [rec] },
});
const nope: HttpApp = { handle: async (_q, r) => void r.writeHead(404).end() };
const tls = new TlsManager({ domain: 'rbx.test', dataDir: dir, log });
const edge = new Edge({
  domain: 'rbx.test',
  http: { host: '127.0.0.1', port: 0, redirect: false },
  https: { host: '127.0.0.1', port: 0 },
  tls,
  log,
  apps: { hosting: nope, verify: nope, proxy },
});
await edge.start();
process.stdout.write(JSON.stringify(edge.ports) + '\n');
const stop = async () => {
  await edge.stop(200);
  await proxy.stop();
  tls.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
