// The daemon's checkpoints part (main.ts): the store (the directory backend under
// <dataDir>/checkpoints; the S3 backend where the operator configures one), the secret its keys
// come from (this host's <dataDir>/secrets/host.key on a single box, the cluster's shared secret
// in cluster mode, so any host of the cluster opens any checkpoint) and the runtime's disk copies.

import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Runtime } from '../runtime/index.js';
import type { BlobStore } from './blobs.js';
import { DirBlobStore } from './dirstore.js';
import { CheckpointEngine } from './engine.js';
import { openS3BlobStore, type S3Settings } from './s3.js';
import { hostSecret, type CheckpointSecret } from './seal.js';
import { Checkpoints } from './service.js';

export interface CheckpointParts {
  cfg: { dataDir: string; checkpoints: { store?: string; s3: S3Settings }; cluster?: { host?: string } };
  runtime: Runtime;
  /** Cluster mode: the registry's shared secret. */
  registry?: { accounts: { secret(): Promise<Buffer> } };
}

export function startCheckpoints(d: CheckpointParts, store?: BlobStore): Checkpoints {
  const secret: CheckpointSecret = d.registry ? { key: () => d.registry!.accounts.secret() } : hostSecret(d.cfg.dataDir);
  const where = d.cfg.checkpoints.store;
  store ??= where ? openS3BlobStore(where, d.cfg.checkpoints.s3) : new DirBlobStore(join(d.cfg.dataDir, 'checkpoints'));
  // this data dir on this host: the one daemon that runs on it writes the markers and locks of this owner
  const owner = `${d.cfg.cluster?.host ?? hostname()}:${d.cfg.dataDir}`;
  const engine = new CheckpointEngine({ store, secret, owner });
  return new Checkpoints(engine, d.runtime);
}
