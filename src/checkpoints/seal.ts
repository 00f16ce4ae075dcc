// What a blob holds, sealed before it leaves the engine: chunks and manifests are compressed
// (zstd from node:zlib) and encrypted with AES-256-GCM under keys derived (HKDF-SHA256) from the
// host's secret — on one box <dataDir>/secrets/host.key, in cluster mode the cluster's shared
// secret — behind the CheckpointSecret interface. A chunk is named by an HMAC-SHA256 of its
// plain bytes under another derived key, so equal chunks are stored once (deduplicated) while the
// store learns nothing of their content, not even whether two servers hold a well-known file.
//
// Sealed form: version byte (1), 12-byte random IV, 16-byte tag, ciphertext of
// (codec byte ‖ body); the blob's key is the additional data, so a blob copied to another key does
// not open. open() checks the tag, and for chunks the name again: a corrupted, truncated or
// swapped blob is refused (CorruptBlobError), never returned.

import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { constants as zc, zstdCompressSync, zstdDecompressSync } from 'node:zlib';

/** The secret checkpoint keys come from (32 bytes or more); read once per engine. */
export interface CheckpointSecret {
  key(): Promise<Buffer>;
}

/** A blob that does not open: wrong key, corrupted or truncated bytes, or a chunk whose bytes do
 *  not match its name. */
export class CorruptBlobError extends Error {
  constructor(readonly key: string) {
    super(`checkpoint blob ${key} is corrupt`);
    this.name = 'CorruptBlobError';
  }
}

const V1 = 1;
const RAW = 0;
const ZSTD = 1;
const SALT = Buffer.from('rootbox checkpoints');

/** The single box's secret: <dataDir>/secrets/host.key (32 random bytes, made once — the file
 *  hosting seals api keys with). Kept in the state backup: without it no checkpoint opens. */
export function hostSecret(dataDir: string): CheckpointSecret {
  return {
    key: async () => {
      const dir = join(dataDir, 'secrets');
      const file = join(dir, 'host.key');
      if (!existsSync(file)) {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        try {
          writeFileSync(file, randomBytes(32), { mode: 0o600, flag: 'wx' });
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        }
      }
      return readFileSync(file);
    },
  };
}

export class Sealer {
  private readonly idKey: Buffer;
  private readonly encKey: Buffer;

  constructor(secret: Buffer) {
    if (secret.length < 16) throw new Error('checkpoint secret too short');
    const derive = (info: string) => Buffer.from(hkdfSync('sha256', secret, SALT, info, 32));
    this.idKey = derive('rootbox checkpoint chunk id v1');
    this.encKey = derive('rootbox checkpoint seal v1');
  }

  /** A chunk's name: hex HMAC-SHA256 of its plain bytes. */
  chunkId(plain: Uint8Array): string {
    return createHmac('sha256', this.idKey).update(plain).digest('hex');
  }

  seal(plain: Uint8Array, key: string): Buffer {
    const packed = zstdCompressSync(plain, { params: { [zc.ZSTD_c_compressionLevel]: 3 } });
    const [codec, body] = packed.length < plain.length ? [ZSTD, packed] : [RAW, plain];
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.encKey, iv);
    c.setAAD(Buffer.from(key));
    const ct = Buffer.concat([c.update(Buffer.from([codec])), c.update(body), c.final()]);
    return Buffer.concat([Buffer.from([V1]), iv, c.getAuthTag(), ct]);
  }

  /** The plain bytes of a sealed blob, or CorruptBlobError. */
  open(sealed: Uint8Array, key: string, maxBytes: number): Buffer {
    const b = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
    if (b.length < 30 || b[0] !== V1) throw new CorruptBlobError(key);
    let inner: Buffer;
    try {
      const d = createDecipheriv('aes-256-gcm', this.encKey, b.subarray(1, 13));
      d.setAAD(Buffer.from(key));
      d.setAuthTag(b.subarray(13, 29));
      inner = Buffer.concat([d.update(b.subarray(29)), d.final()]);
    } catch {
      throw new CorruptBlobError(key);
    }
    if (inner[0] === RAW) return inner.subarray(1);
    if (inner[0] !== ZSTD) throw new CorruptBlobError(key);
    try {
      return zstdDecompressSync(inner.subarray(1), { maxOutputLength: maxBytes });
    } catch {
      throw new CorruptBlobError(key);
    }
  }

  /** open() of a chunk, checked against its name as well. */
  openChunk(sealed: Uint8Array, key: string, id: string, maxBytes: number): Buffer {
    const plain = this.open(sealed, key, maxBytes);
    const want = Buffer.from(id, 'hex');
    const got = Buffer.from(this.chunkId(plain), 'hex');
    if (want.length !== got.length || !timingSafeEqual(want, got)) throw new CorruptBlobError(key);
    return plain;
  }
}
