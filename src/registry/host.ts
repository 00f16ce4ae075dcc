// What this host tells the registry about itself: its name, where the others reach it (the
// configured advertise address, or its public IP with the cluster listener's port), and its
// capacity as measured now (free memory, free disk of the data dir).

import { statfsSync } from 'node:fs';
import { freemem } from 'node:os';
import { hostName } from '../config/index.js';

export interface RegistryOptions {
  url: string;
  host: string;
  advertise: string;
  publicIp: string;
  version: string;
  leaseMs: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  /** How long a tombstone some live host has not caught up past is kept (cluster.tombstoneRetention). */
  tombstoneRetentionMs?: number;
  /** The data dir, which keeps this instance's id (identity.ts). */
  dataDir: string;
  /** The operator said --replace-host: take over a name another instance held (its servers marked lost). */
  replaceHost: boolean;
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
    tombstoneRetention?: number;
    replaceHost?: boolean;
  };
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
    tombstoneRetentionMs: cfg.cluster.tombstoneRetention,
    dataDir: cfg.dataDir,
    replaceHost: cfg.cluster.replaceHost === true,
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
