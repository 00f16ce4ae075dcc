// What this host tells the registry about itself: its name, where the others reach it (the
// configured advertise address, or its public IP with the cluster listener's port), and its
// capacity as measured now (free memory, free disk of the data dir); the cluster token it was
// given (config, environment or token file), whose keys open the registry's secrets.

import { readFileSync, statfsSync } from 'node:fs';
import { freemem } from 'node:os';
import { join } from 'node:path';
import { hostName } from '../config/index.js';
import { AppError } from '../errors.js';
import { ClusterKeys } from './token.js';

export interface RegistryOptions {
  url: string;
  host: string;
  advertise: string;
  publicIp: string;
  version: string;
  leaseMs: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  /** How long a host's lease must have lapsed, unreached, before it is dead (cluster.recoverAfter; 0: never). */
  recoverAfterMs?: number;
  /** How long a tombstone some live host has not caught up past is kept (cluster.tombstoneRetention). */
  tombstoneRetentionMs?: number;
  /** The data dir, which keeps this instance's id (identity.ts). */
  dataDir: string;
  /** The operator said --replace-host: take over a name another instance held (its servers marked lost). */
  replaceHost: boolean;
  /** The cluster token's keys: they open the registry's secrets and prove this host a member. */
  keys: ClusterKeys;
  /** What this host can still take, measured at each heartbeat. */
  capacity(): Record<string, number>;
}

export interface ClusterSettings {
  dataDir: string;
  publicIp: string;
  cluster: {
    host?: string;
    advertise?: string;
    listen: string;
    lease: number;
    connectTimeout: number;
    statementTimeout: number;
    recoverAfter?: number;
    tombstoneRetention?: number;
    replaceHost?: boolean;
    token?: string;
    tokenFile?: string;
  };
}

/** The file `rootbox cluster init` writes the token it makes to, and a host reads it from. */
export function tokenFileOf(cfg: Pick<ClusterSettings, 'dataDir' | 'cluster'>): string {
  return cfg.cluster.tokenFile ?? join(cfg.dataDir, 'cluster-token');
}

/** The keys of the token this host was given: cluster.token (or ROOTBOX_CLUSTER_TOKEN), else the
 *  token file; cluster_token_missing without one (the host refuses to start, writing nothing). */
export function clusterKeys(cfg: Pick<ClusterSettings, 'dataDir' | 'cluster'>): ClusterKeys {
  if (cfg.cluster.token) return new ClusterKeys(cfg.cluster.token);
  const file = tokenFileOf(cfg);
  let token: string;
  try {
    token = readFileSync(file, 'utf8').trim();
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'there is no token file' : 'the token file cannot be read';
    throw AppError.of(
      'cluster_token_missing',
      `cluster mode needs the cluster token \`rootbox cluster init\` made: set cluster.token (ROOTBOX_CLUSTER_TOKEN) or cluster.tokenFile (${why} at ${file})`,
    );
  }
  return new ClusterKeys(token);
}

/** The software version hosts report (bundles set it; source runs say "dev"). */
export const HOST_VERSION = process.env.ROOTBOX_BUILD_VERSION ?? 'dev';

export function registryOptions(cfg: ClusterSettings, url: string): RegistryOptions {
  const port = cfg.cluster.listen.slice(cfg.cluster.listen.lastIndexOf(':') + 1);
  return {
    url,
    host: hostName(cfg.cluster.host),
    advertise: cfg.cluster.advertise ?? `${cfg.publicIp.includes(':') ? `[${cfg.publicIp}]` : cfg.publicIp}:${port}`,
    publicIp: cfg.publicIp,
    version: HOST_VERSION,
    leaseMs: cfg.cluster.lease,
    connectTimeoutMs: cfg.cluster.connectTimeout,
    statementTimeoutMs: cfg.cluster.statementTimeout,
    recoverAfterMs: cfg.cluster.recoverAfter,
    tombstoneRetentionMs: cfg.cluster.tombstoneRetention,
    dataDir: cfg.dataDir,
    replaceHost: cfg.cluster.replaceHost === true,
    keys: clusterKeys(cfg),
    capacity: () => {
      let diskFreeBytes = 0;
      try {
        const s = statfsSync(cfg.dataDir);
        diskFreeBytes = s.bavail * s.bsize;
      } catch {
        // a data dir that cannot be read reports no free disk
      }
      return { memoryFreeBytes: freemem(), diskFreeBytes };
    },
  };
}
