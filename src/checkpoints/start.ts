// The daemon's checkpoints part (main.ts): the store (the directory backend under
// <dataDir>/checkpoints; the S3 backend where the operator configures one), the secret its keys
// come from (this host's <dataDir>/secrets/host.key on a single box, the cluster's shared secret
// in cluster mode, so any host of the cluster opens any checkpoint), the data dir's id its markers
// and locks carry, and the runtime's disk copies.

import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
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

const ID_FILE = 'checkpoint-owner';

/** The data dir's own id (created once, 0600): the owner of the markers and locks its daemon
 *  writes. Random, not the host's name and path: a recovery drill box with the same hostname and
 *  data dir path is another owner, so its daemon never takes production's live markers for its
 *  own killed run's. Not in the state backup: a rebuilt data dir gets a new one. */
export function dataDirId(dataDir: string): string {
  const file = join(dataDir, ID_FILE);
  try {
    writeFileSync(file, `${randomBytes(16).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const id = readFileSync(file, 'utf8').trim();
  if (!/^[0-9a-f]{32}$/.test(id)) throw new Error(`${file} does not hold a data dir id`);
  return id;
}

export function startCheckpoints(d: CheckpointParts, store?: BlobStore): Checkpoints {
  const secret: CheckpointSecret = d.registry ? { key: () => d.registry!.accounts.secret() } : hostSecret(d.cfg.dataDir);
  const where = d.cfg.checkpoints.store;
  store ??= where ? openS3BlobStore(where, d.cfg.checkpoints.s3) : new DirBlobStore(join(d.cfg.dataDir, 'checkpoints'));
  // this data dir: the one daemon that runs on it writes the markers and locks of this owner
  const owner = dataDirId(d.cfg.dataDir);
  const engine = new CheckpointEngine({ store, secret, owner });
  return new Checkpoints(engine, d.runtime);
}
