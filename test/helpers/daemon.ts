// Starts a real daemon (real LMDB, real TLS with its generated CA, real listeners) on free
// loopback ports in a fresh data dir, and tears it all down again. Its runtime is the real one
// (runc containers, root) unless ROOTBOX_TEST_RUNTIME=process, which scripts/test.mjs sets for the
// files of the fast tier: then servers are plain processes (procruntime.ts) and the daemon needs
// neither root nor runc.
// ROOTBOX_TEST_REGISTRY=1 (scripts/test.mjs sets it for the contract suites' second run) puts
// every daemon that names no cluster of its own in registry mode: one PostgreSQL per test process
// (test/helpers/postgres.ts, started at the first daemon, prepared by `cluster init`: schema, CA;
// stopped when the process exits), each daemon under its own host name.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type Config } from '../../src/config/index.js';
import { createLogger, type Logger } from '../../src/log/index.js';
import { startDaemon, type Daemon, type RuntimeMaker } from '../../src/main.js';
import { ContainerRuntime, type Runtime } from '../../src/runtime/index.js';
import { removeCgroup } from '../../src/runtime/cgroup.js';
import type { Clock } from '../../src/clock.js';
import { AppError } from '../../src/errors.js';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { TEST_CLUSTER_TOKEN, withToken } from './cluster.js';
import { freePort } from './ports.js';
import { startPostgres, type TestPostgres } from './postgres.js';
import { ProcessRuntime } from './procruntime.js';
import { run } from './run.js';

export interface TestDaemon {
  cfg: Readonly<Config>;
  /** Its runtime is a ContainerRuntime, or a ProcessRuntime in the fast tier (`containers` says which). */
  daemon: Daemon<Runtime>;
  containers: boolean;
  dataDir: string;
  http: number;
  https: number;
  /** PEM of the generated local CA. */
  ca: string;
  /** Log lines the daemon wrote, parsed. */
  logs: Record<string, unknown>[];
  stop(): Promise<void>;
}

const repo = new URL('../../', import.meta.url).pathname;
let seq = 0;

/** Runtime settings of its own for each test daemon: bridge, subnet, nft table and uid ranges
 *  that collide with nothing else on the host; the base image cache is shared. Picked from the
 *  pid; `attempt` moves to another set when a daemon of another test file holds this one. */
function ownRuntime(attempt = 0): Record<string, unknown> {
  const n = 100 + ((process.pid + seq++ + attempt * 37) % 150);
  return {
    imageDir: process.env.ROOTBOX_IMAGE_DIR ?? join(repo, 'var', 'images'),
    bridge: `rbd${n}`,
    subnet: `10.197.${n}.0/24`,
    nftTable: `rbd${n}`,
    uidStart: 2_000_000_000 + n * 65536 * 64,
    uidRanges: 64,
    stopGrace: '1s',
  };
}

/** A daemon of its own, on the next name set when another live daemon holds the names tried
 *  (host_names_taken: another test file's daemon); the names a test gives itself are kept. */
/** An exposed-port pool of its own (100 ports), from the same pick as the runtime names. */
function portPool(attempt: number): string {
  const n = (process.pid + seq + attempt * 37) % 300;
  return `${30000 + n * 100}-${30000 + n * 100 + 99}`;
}

/** Whether daemons of this test process run in registry mode (ROOTBOX_TEST_REGISTRY=1). */
export const registryMode = process.env.ROOTBOX_TEST_REGISTRY === '1';
let registry: Promise<TestPostgres> | undefined;
/** Host names of the registry-mode daemons by data dir. */
const hostNames = new Map<string, string>();

/** The test process's one registry: a PostgreSQL of its own, prepared by `rootbox cluster init`; ended with the process (pg_ctl immediate stop, its directory removed). */
export function testRegistry(): Promise<TestPostgres> {
  registry ??= (async () => {
    const pg = await startPostgres();
    process.on('exit', () => {
      spawnSync('runuser', ['-u', 'postgres', '--', '/usr/lib/postgresql/15/bin/pg_ctl', '-D', join(pg.dir, 'data'), '-m', 'immediate', '-w', 'stop']);
      rmSync(pg.dir, { recursive: true, force: true });
    });
    // `rootbox cluster init`, in this process: the schema, the tests' cluster token, the cluster CA
    const out: string[] = [];
    const cfg = loadConfig({ env: {}, file: undefined, overrides: { dataDir: join(pg.dir, 'cli'), cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN } } });
    const code = await clusterCommand(cfg, 'init', {}, { out: (t) => out.push(t), err: (t) => out.push(t) });
    if (code !== 0) throw new Error(`cluster init failed: ${out.join('\n')}`);
    return pg;
  })();
  return registry;
}

/** The cluster settings of a daemon in registry mode: the process's registry, a host name of its own. */
async function clusterOf(overrides: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (!registryMode || overrides.cluster !== undefined) return {};
  const pg = await testRegistry();
  // a daemon started again on the same data dir is the same host
  const dir = typeof overrides.dataDir === 'string' ? overrides.dataDir : undefined;
  const host = (dir && hostNames.get(dir)) ?? `test-${process.pid}-${seq++}`;
  // its channel listener (cluster init made the CA) on a port of its own
  const listen = `127.0.0.1:${await freePort()}`;
  return {
    cluster: { registry: pg.url, token: TEST_CLUSTER_TOKEN, host, listen, advertise: listen, lease: '3s', connectTimeout: '1s', statementTimeout: '3s' },
  };
}

/** `now`: the daemon's clock for the time windows it keeps itself (the SMS resend gap), which a
 *  test moves instead of waiting. */
export async function startTestDaemon(
  overrides: Record<string, unknown> = {},
  env: NodeJS.ProcessEnv = {},
  now?: () => number,
  /** The clock of the cluster join's back-off (main.ts). */
  clock?: Clock,
): Promise<TestDaemon> {
  overrides = { ...(await clusterOf(overrides)), ...overrides };
  if (overrides.cluster) overrides = { ...overrides, cluster: withToken(overrides.cluster) };
  for (let attempt = 0; ; attempt++) {
    try {
      return await startOnce(overrides, env, attempt, now, clock);
    } catch (e) {
      const own = overrides.runtime as Record<string, unknown> | undefined;
      if (!(e instanceof AppError && e.code === 'host_names_taken') || attempt >= 8 || own?.bridge !== undefined) throw e;
    }
  }
}

async function startOnce(overrides: Record<string, unknown>, env: NodeJS.ProcessEnv, attempt: number, now?: () => number, clock?: Clock): Promise<TestDaemon> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-test-'));
  const logs: Record<string, unknown>[] = [];
  const log: Logger = createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) });
  const cfg = loadConfig({
    env,
    file: undefined,
    overrides: {
      dataDir,
      runDir: join(dataDir, 'run'), // its whereabouts (admin/whereabouts.ts) go with it, not into /run
      http: { host: '127.0.0.1', port: 0 },
      https: { host: '127.0.0.1', port: 0 },
      ssh: { host: '127.0.0.1', port: 0 },
      metrics: { listen: '127.0.0.1:0' },
      shutdownTimeout: '2s',
      ...overrides,
      hosting: { portPool: portPool(attempt), ...((overrides.hosting as object) ?? {}) },
      // the tests of sleep and wake test the stop; the doze tests turn dozing on (proxy.dozeTimeout)
      proxy: { dozeTimeout: 0, ...((overrides.proxy as object) ?? {}) },
      runtime: { ...ownRuntime(attempt), ...((overrides.runtime as object) ?? {}) },
    },
  });
  const containers = process.env.ROOTBOX_TEST_RUNTIME !== 'process';
  const processes: RuntimeMaker<Runtime> = async (c, _store, _log, mayStart) => ({
    runtime: new ProcessRuntime({ dir: join(c.dataDir, 'processes'), apps: process.env.ROOTBOX_TEST_PROCESS_APPS === '1', mayStart }),
  });
  let daemon: Daemon<Runtime>;
  try {
    daemon = containers ? await startDaemon(cfg, log, undefined, { now, clock }) : await startDaemon(cfg, log, processes, { now, clock });
  } catch (e) {
    if (e instanceof AppError && e.code === 'host_names_taken') {
      rmSync(dataDir, { recursive: true, force: true });
      throw e; // the names are another daemon's: its network is not ours to remove
    }
    // a daemon that failed part-way may have made its network already
    const { bridge, nftTable } = cfg.runtime;
    if (containers)
      for (const args of [
        ['nft', 'delete', 'table', 'inet', nftTable],
        ['nft', 'delete', 'table', 'bridge', nftTable],
        ['ip', 'link', 'del', bridge],
      ])
        await run(args[0], args.slice(1));
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const cluster = cfg.cluster as { registry?: string; host?: string };
  if (cluster.registry && cluster.host) hostNames.set(cfg.dataDir, cluster.host);
  const { http, https } = daemon.edge.ports;
  const ca = daemon.tls.caFile ? readFileSync(daemon.tls.caFile, 'utf8') : '';
  return {
    cfg,
    daemon,
    containers,
    dataDir,
    http,
    https,
    ca,
    logs,
    async stop() {
      // Test daemons leave nothing behind: every server is deleted and the network torn down
      // (a production daemon keeps its containers running across a stop).
      for (const s of daemon.runtime.list()) {
        await daemon.hosting.core.exposures.releaseServer(s.id).catch(() => {});
        await daemon.runtime.delete(s.id).catch((e) => console.error('test daemon cleanup: delete failed', s.id, e));
      }
      await daemon.stop();
      if (daemon.runtime instanceof ContainerRuntime) {
        await daemon.runtime.net.teardown().catch((e) => console.error('test daemon cleanup: network teardown failed', e));
        removeCgroup(`/${cfg.runtime.nftTable}`); // its servers' cgroup parent (spec.ts cgroupPath), when empty
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
