// Starts a real daemon (real LMDB, real TLS with its generated CA, real listeners) on free
// loopback ports in a fresh data dir, and tears it all down again.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type Config } from '../../src/config/index.js';
import { createLogger, type Logger } from '../../src/log/index.js';
import { startDaemon, type Daemon } from '../../src/main.js';

export interface TestDaemon {
  cfg: Readonly<Config>;
  daemon: Daemon;
  dataDir: string;
  http: number;
  https: number;
  /** PEM of the generated local CA. */
  ca: string;
  /** Log lines the daemon wrote, parsed. */
  logs: Record<string, unknown>[];
  stop(): Promise<void>;
}

export async function startTestDaemon(overrides: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = {}): Promise<TestDaemon> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-test-'));
  const logs: Record<string, unknown>[] = [];
  const log: Logger = createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) });
  const cfg = loadConfig({
    env,
    file: undefined,
    overrides: {
      dataDir,
      http: { host: '127.0.0.1', port: 0 },
      https: { host: '127.0.0.1', port: 0 },
      ssh: { host: '127.0.0.1', port: 0 },
      shutdownTimeout: '2s',
      ...overrides,
    },
  });
  let daemon: Daemon;
  try {
    daemon = await startDaemon(cfg, log);
  } catch (e) {
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const { http, https } = daemon.edge.ports;
  const ca = daemon.tls.caFile ? readFileSync(daemon.tls.caFile, 'utf8') : '';
  return {
    cfg,
    daemon,
    dataDir,
    http,
    https,
    ca,
    logs,
    async stop() {
      await daemon.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
