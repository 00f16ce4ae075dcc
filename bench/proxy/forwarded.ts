// Benchmark helper processes for the forwarded row (issue 29): client → host B's edge → the
// channel (mutual TLS under a cluster CA: the raw lane's multiplexed connection for these
// bodiless GETs once the HTTP/2 session is open, which the warm-up's first request opens) → host
// A's channel server → A's proxy lane → the app.
//   owner <app host> <app port> <dir>  host A: the proxy as serve.ts builds it (a real LMDB store
//                                       with srv_bench, run.sh published) behind the channel
//                                       server; writes the CA to <dir>/cluster-ca.json; prints {"http": channel port}
//   sender <channel port> <dir> [lane]  host B: the real Edge with the channel's front, whose
//                                       placement lookup says bench lives on host-a (a fixed map: the
//                                       registry is not what is measured); prints {"http", "https"}.
//                                       lane: raw (default: the raw lane, as the daemon runs) or full
//                                       (no raw pool: node's server and the front's full path over
//                                       the HTTP/2 session, as beyond the raw pool's cap)
// Usage: node --import tsx bench/proxy/forwarded.ts owner 127.0.0.2 80 /tmp/x

import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { issueIdentity } from '../../src/channel/identity.js';
import { RetryBudget } from '../../src/channel/sender-body.js';
import { ClusterFront } from '../../src/channel/sender-front.js';
import type { Placements } from '../../src/channel/lookup.js';
import { Peers } from '../../src/channel/sender-peers.js';
import { ChannelServer } from '../../src/channel/owner-server.js';
import { proxySchema } from '../../src/config/proxy.js';
import { createCa, Edge, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy } from '../../src/proxy/index.js';
import type { CaPair } from '../../src/registry/index.js';
import type { RuntimeServer } from '../../src/runtime/types.js';
import { openStore } from '../../src/store/index.js';

const log = createLogger({ level: 'error' });
const [mode] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-fwd-'));
const stops: (() => unknown)[] = [];
const stop = async () => {
  for (const s of stops.reverse()) await s();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());

if (mode === 'owner') {
  const [, host, port, shared] = process.argv.slice(2);
  const name = 'rootbox cluster CA';
  const pair: CaPair = { name, ...createCa(name) };
  writeFileSync(join(shared, 'cluster-ca.json'), JSON.stringify(pair));
  const rootfs = join(dir, 'rootfs');
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
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
  const identity = issueIdentity(pair, 'host-a');
  const server = new ChannelServer({ identity: () => identity, local: proxy, servers: store.servers, placements: { byServer: () => undefined }, log });
  void port; // the app is at host:80 (the proxy always forwards there)
  const http = await server.listen('127.0.0.1:0');
  stops.push(
    () => store.close(),
    () => proxy.stop(),
    () => server.close(),
  );
  process.stdout.write(JSON.stringify({ http }) + '\n');
} else if (mode === 'sender') {
  const [, channelPort, shared, lane = 'raw'] = process.argv.slice(2);
  const pair = JSON.parse(readFileSync(join(shared, 'cluster-ca.json'), 'utf8')) as CaPair;
  const identity = issueIdentity(pair, 'host-b');
  const placement = { serverId: 'srv_bench', slug: 'bench', host: 'host-a', epoch: 1 };
  const placements: Placements = {
    bySlug: (slug) => (slug === 'bench' ? placement : undefined),
    byServer: (id) => (id === placement.serverId ? placement : undefined),
    fresh: async (slug) => (slug === 'bench' ? placement : undefined),
    host: (n) => (n === 'host-a' ? { name: n, advertise: `127.0.0.1:${channelPort}`, up: true } : undefined),
  };
  const peers = new Peers({ identity: () => identity, connectTimeoutMs: 2000, log });
  // without the raw pool a GET takes the full path (node's server, the HTTP/2 session)
  if (lane === 'full') peers.raw = () => undefined;
  // this host runs no server: its own proxy knows none
  const local = createProxy({ log, cfg: proxySchema.parse({}), sites: { lookup: () => undefined, neverSleep: () => false } });
  const front = new ClusterFront({
    local,
    servers: { bySlug: () => undefined },
    placements,
    peers,
    self: 'host-b',
    retry: { cap: 1024 * 1024, budget: new RetryBudget(8 << 20, 64 << 20) },
    log,
  });
  const nope: HttpApp = { handle: async (_q, r) => void r.writeHead(404).end() };
  const tls = new TlsManager({ domain: 'rbx.test', dataDir: dir, log });
  const edge = new Edge({
    domain: 'rbx.test',
    http: { host: '127.0.0.1', port: 0, redirect: false },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: nope, verify: nope, proxy: front },
  });
  await edge.start();
  stops.push(
    () => tls.close(),
    () => local.stop(),
    () => peers.close(),
    () => edge.stop(200),
  );
  process.stdout.write(JSON.stringify(edge.ports) + '\n');
} else {
  process.stderr.write('usage: forwarded.ts owner <app host> <app port> <dir> | sender <channel port> <dir>\n');
  process.exit(2);
}
