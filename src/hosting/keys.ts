// api_keys: `rbx_` + 32 base62 characters. Stored as a SHA-256 hash (lookup) and as AES-256-GCM
// ciphertext under the host secret (so a phone login can return the same key). The host secret
// is 32 random bytes in <dataDir>/secrets/host.key, made once; in cluster mode the cluster secret
// (made by `rootbox cluster init`, read from the registry) takes its place for keys and codes.

import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AppError } from '../errors.js';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
export const API_KEY_RE = /^rbx_[0-9A-Za-z]{32}$/;

export function randomBase62(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += BASE62[randomInt(62)];
  return s;
}

export const newApiKey = (): string => `rbx_${randomBase62(32)}`;
export const hashKey = (key: string): string => createHash('sha256').update(key).digest('hex');

/** Constant-time comparison of two hex digests of equal length. */
export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}

/** What api keys are sealed and SMS codes MAC'd with. `ready` (cluster mode) resolves once the
 *  secret is known; before that the sync methods throw 503 registry_unavailable. */
export interface KeySecret {
  ready?(): Promise<void>;
  encrypt(plain: string): string;
  decrypt(sealed: string): string;
  mac(value: string): string;
}

class Sealer implements KeySecret {
  constructor(protected key: Buffer) {}

  encrypt(plain: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    const ct = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return Buffer.concat([iv, c.getAuthTag(), ct]).toString('base64');
  }

  decrypt(sealed: string): string {
    const b = Buffer.from(sealed, 'base64');
    const d = createDecipheriv('aes-256-gcm', this.key, b.subarray(0, 12));
    d.setAuthTag(b.subarray(12, 28));
    return Buffer.concat([d.update(b.subarray(28)), d.final()]).toString('utf8');
  }

  mac(value: string): string {
    return createHmac('sha256', this.key).update(value).digest('hex');
  }
}

function hostKey(dataDir: string): Buffer {
  const dir = join(dataDir, 'secrets');
  const file = join(dir, 'host.key');
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeFileSync(file, randomBytes(32), { mode: 0o600, flag: 'wx' });
  }
  return readFileSync(file);
}

export class HostSecret extends Sealer {
  constructor(dataDir: string) {
    super(hostKey(dataDir));
  }
}

/** The cluster's shared secret, read from the registry on first need (and kept). */
export class ClusterSecret extends Sealer {
  private loading?: Promise<void>;
  private loaded = false;

  constructor(private readonly load: () => Promise<Buffer>) {
    super(Buffer.alloc(0));
  }

  ready(): Promise<void> {
    if (this.loaded) return Promise.resolve();
    this.loading ??= this.load().then(
      (key) => {
        this.key = key;
        this.loaded = true;
      },
      (err: unknown) => {
        this.loading = undefined;
        throw err;
      },
    );
    return this.loading;
  }

  private check(): void {
    if (!this.loaded) throw AppError.of('registry_unavailable', 'the cluster registry has not been reached yet; try again shortly', { retryAfter: 5 });
  }

  override encrypt(plain: string): string {
    this.check();
    return super.encrypt(plain);
  }

  override decrypt(sealed: string): string {
    this.check();
    return super.decrypt(sealed);
  }

  override mac(value: string): string {
    this.check();
    return super.mac(value);
  }
}

/** A box joining a cluster (registry/join.ts): an api key sealed under this host's secret, sealed
 *  under the cluster secret instead; one the cluster secret seals already (an account a cluster
 *  host cached) is kept as it is. */
export function resealForCluster(dataDir: string, keyEnc: string, clusterSecret: Buffer): string {
  const cluster = new Sealer(clusterSecret);
  try {
    return cluster.encrypt(new HostSecret(dataDir).decrypt(keyEnc));
  } catch {
    cluster.decrypt(keyEnc); // throws when neither secret opens it
    return keyEnc;
  }
}
