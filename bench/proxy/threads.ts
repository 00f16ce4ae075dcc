// Benchmark prototype (not the product): the proxy path in N worker threads of one process,
// sharing the listening sockets. The main thread opens the listeners and the store (as the daemon
// would) and does not accept; each worker runs the real Edge + proxy (as serve.ts builds them,
// LMDB opened from the same data dir) and accepts on the shared listening fds — every thread's
// epoll sees the listener and the kernel gives each connection to one of them. What this leaves
// out, and a real build would need: per-source/total connection caps and hold limits counted
// across threads (shared counters), egress and metrics reported to the main thread, presence
// (wake/doze) decided in one place.
// Usage: node --import tsx bench/proxy/threads.ts <app host> <app port> <threads>  → prints {"http", "https"}

import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { proxySchema } from '../../src/config/proxy.js';
import { Edge, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy } from '../../src/proxy/index.js';
import type { RuntimeServer } from '../../src/runtime/types.js';
import { openStore } from '../../src/store/index.js';

interface Data {
  host: string;
  port: number;
  dir: string;
  /** The listeners to share; absent for the first worker, which opens them. */
  fds?: { http: number; https: number };
}

async function worker(d: Data): Promise<void> {
  const log = createLogger({ level: 'error' });
  const store = openStore(join(d.dir, 'data'));
  const rec: RuntimeServer = {
    id: 'srv_bench',
    slug: 'bench',
    ip: d.host,
    uidBase: 0,
    memoryBytes: 0,
    diskBytes: 0,
    rootfs: join(d.dir, 'rootfs'),
    state: 'running',
  };
  const proxy = createProxy({
    log,
    cfg: proxySchema.parse({}),
    servers: store.servers,
    runtime: { start: async () => {}, stop: async () => {}, get: (id) => (id === rec.id ? rec : undefined), list: () => [rec] },
  });
  const nope: HttpApp = { handle: async (_q, r) => void r.writeHead(404).end() };
  const tls = new TlsManager({ domain: 'rbx.test', dataDir: d.dir, log });
  const edge = new Edge({
    domain: 'rbx.test',
    http: { host: '127.0.0.1', port: 0, redirect: false },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: nope, verify: nope, proxy },
  });
  await edge.start();
  type Inner = { accept(s: Socket, srv: unknown, tls: boolean): void; http: unknown; https: unknown; front: Record<'http' | 'https', Server> };
  const e = edge as unknown as Inner;
  const fdOf = (s: Server) => (s as unknown as { _handle: { fd: number } })._handle.fd;
  if (!d.fds) return parentPort!.postMessage({ fds: { http: fdOf(e.front.http), https: fdOf(e.front.https) }, ports: edge.ports });
  // the edge's own front listeners stay on their private ports; these take the shared ones
  const front = (fd: number, tlsListener: boolean) =>
    createServer({ allowHalfOpen: true, noDelay: true }, (s) => e.accept(s, tlsListener ? e.https : e.http, tlsListener)).listen({ fd });
  front(d.fds.http, false);
  front(d.fds.https, true);
  parentPort!.postMessage({});
}

if (isMainThread) {
  const [host, port, n] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4] ?? 2)];
  const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-threads-'));
  mkdirSync(join(dir, 'rootfs/root'), { recursive: true });
  writeFileSync(join(dir, 'rootfs/root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(dir, 'rootfs/root/run.sh'), 0o755);
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
  // the TLS manager makes its CA and key once, here, before the workers read them
  new TlsManager({ domain: 'rbx.test', dataDir: dir, log: createLogger({ level: 'error' }) }).contextFor('bench.rbx.test');
  type Ready = { fds?: Data['fds']; ports?: { http: number; https: number } };
  // node 20 does not carry --import tsx into workers: each registers tsx itself, then loads this file
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(import.meta.url)}); })`;
  const start = (data: Data) => {
    const w = new Worker(boot, { eval: true, workerData: data });
    return [w, new Promise<Ready>((r, j) => (w.once('message', r), w.once('error', j)))] as const;
  };
  const [first, opened] = start({ host, port, dir });
  const { fds, ports } = await opened;
  const rest = Array.from({ length: n - 1 }, () => start({ host, port, dir, fds }));
  await Promise.all(rest.map(([, ready]) => ready));
  const workers = [first, ...rest.map(([w]) => w)];
  process.stdout.write(JSON.stringify(ports) + '\n');
  process.on('SIGTERM', () => {
    // the workers' LMDB handles close with them: the data dir goes once every worker has ended
    void Promise.all(workers.map((w) => w.terminate())).then(() => {
      rmSync(dir, { recursive: true, force: true });
      process.exit(0);
    });
  });
} else {
  await worker(workerData as Data);
}
