// What every operator command shares: where it writes (stdout/stderr, swapped in tests), the
// flags the command line parsed, and a small pool on the configured registry (cluster mode).

import type { Config } from '../config/index.js';
import { RegistryPool } from '../registry/index.js';

export interface CliOut {
  out(text: string): void;
  err(text: string): void;
}

export interface CliFlags {
  json?: boolean;
  yes?: boolean;
  account?: string;
  /** servers list: every host's placements from the registry. */
  cluster?: boolean;
  /** servers move: the host to move the server to. */
  to?: string;
}

/** A small pool on the configured registry; undefined on a single box. */
export function registryPool(cfg: Readonly<Config>): RegistryPool | undefined {
  const url = cfg.cluster.registry;
  if (!url) return undefined;
  return new RegistryPool({ url, connectTimeoutMs: cfg.cluster.connectTimeout, statementTimeoutMs: cfg.cluster.statementTimeout, max: 2 });
}

/** registryPool, saying why there is none. */
export function poolOf(cfg: Readonly<Config>, io: CliOut): RegistryPool | undefined {
  const pool = registryPool(cfg);
  if (!pool) io.err('rootbox: cluster.registry (ROOTBOX_REGISTRY) is not set: this host is a single box');
  return pool;
}
