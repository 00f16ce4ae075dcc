// The S3 backend of the blob store: any S3-compatible object store (AWS S3, Cloudflare R2,
// Backblaze B2, Ceph RGW, Garage) through the AWS SDK's S3 client, which owns the protocol
// (SigV4, retries with back-off, error codes). `checkpoints.store` = s3://bucket/prefix names
// where the blobs go (a blob's key is <prefix>/<key>); `checkpoints.s3` how to reach it; the
// credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional
// AWS_SESSION_TOKEN) and are never logged or shown. Bounded: kept-alive connections up to
// maxConnections, a connect timeout, and one deadline per operation (its retries included)
// that doubles as the idle limit of its connection. Failures are sorted in s3errors.ts. The SDK is
// loaded on the store's first operation (s3sdk.ts), not with the daemon (its load was a sixth of the CPU of
// a daemon's start, and most boxes keep checkpoints in the directory store).

import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { ListObjectsV2CommandOutput, S3Client, S3ClientConfig } from '@aws-sdk/client-s3';
import { AppError, InternalError } from '../errors.js';
import { StoreUnavailableError, type BlobStore } from './blobs.js';
import { isMissingKey, storeError } from './s3errors.js';

/** How to reach the store: `checkpoints.s3` of the config (durations in ms). */
export interface S3Settings {
  endpoint?: string;
  region: string;
  connectTimeout: number;
  timeout: number;
  maxConnections: number;
  maxAttempts: number;
}

export interface S3StoreOptions extends S3Settings {
  /** Where the credentials are read (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Keys per page of a listing (S3's most and default: 1000). */
  pageSize?: number;
}

const SEGMENT = /^[A-Za-z0-9._-]+$/;
const MAX_KEY = 900; // S3 allows 1024 bytes with the store's prefix

/** Refuses a key that is not relative '/'-separated [A-Za-z0-9._-] segments ('.' and '..' neither). */
export function checkBlobKey(key: string, what = 'key'): void {
  const ok = typeof key === 'string' && key.length > 0 && key.length <= MAX_KEY && key.split('/').every((s) => SEGMENT.test(s) && s !== '.' && s !== '..');
  if (!ok) throw new InternalError(`invalid blob ${what}`, { key: String(key).slice(0, 100) });
}

/** Bucket and prefix of s3://bucket/prefix (the config checked its form). */
export function parseS3Url(url: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])((?:\/[A-Za-z0-9._-]+)*)\/?$/.exec(url);
  if (!m) throw AppError.of('config_invalid', 'checkpoints.store: must be s3://bucket or s3://bucket/prefix');
  const prefix = m[2].slice(1);
  if (prefix) checkBlobKey(prefix, 'store prefix');
  return { bucket: m[1], prefix };
}

function credentials(env: NodeJS.ProcessEnv) {
  const accessKeyId = env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
  if (!accessKeyId || !secretAccessKey)
    throw AppError.of('config_invalid', 'checkpoints.store is an s3:// store: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment');
  return { accessKeyId, secretAccessKey, ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}) };
}

const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };

type Sdk = typeof import('./s3sdk.js');
let sdk: Promise<Sdk> | undefined;
const loadSdk = (): Promise<Sdk> => (sdk ??= import('./s3sdk.js'));

/** The S3 client the store uses, as configured (also the benchmark's raw PUT peer). */
export async function makeS3Client(opts: S3StoreOptions): Promise<S3Client> {
  const config = clientConfig(opts);
  return new (await loadSdk()).S3Client(config);
}

/** The client's settings; refuses a bad endpoint or missing credentials at once. */
function clientConfig(opts: S3StoreOptions): S3ClientConfig {
  if (opts.endpoint !== undefined && !/^https?:\/\/[^/@]+(\/|$)/.test(opts.endpoint))
    throw AppError.of('config_invalid', 'checkpoints.s3.endpoint: must be an http:// or https:// URL without credentials');
  const agent = { keepAlive: true, maxSockets: opts.maxConnections, maxFreeSockets: opts.maxConnections };
  return {
    region: opts.region,
    ...(opts.endpoint !== undefined ? { endpoint: opts.endpoint, forcePathStyle: true } : {}),
    credentials: credentials(opts.env ?? process.env),
    // RGW 16 (and other clones) refuse the SDK's default checksums on a streamed PUT (411)
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: opts.maxAttempts,
    logger: quiet,
    requestHandler: {
      connectionTimeout: opts.connectTimeout,
      socketTimeout: opts.timeout,
      httpAgent: new HttpAgent(agent),
      httpsAgent: new HttpsAgent(agent),
      socketAcquisitionWarningTimeout: 10 * opts.timeout,
      logger: quiet,
    },
  };
}

/** A blob store in the S3 bucket and prefix of `url` (s3://bucket/prefix). */
export function openS3BlobStore(url: string, opts: S3StoreOptions): BlobStore {
  const { bucket, prefix } = parseS3Url(url);
  const base = prefix ? `${prefix}/` : '';
  const where = `s3://${bucket}${prefix ? `/${prefix}` : ''}`;
  const config = clientConfig(opts);
  let made: { client: S3Client; sdk: Sdk } | undefined;
  /** The client and the SDK's command classes (the client made on the first operation). */
  const s3 = async () => {
    const sdk = await loadSdk();
    return (made ??= { client: new sdk.S3Client(config), sdk });
  };
  const pageSize = Math.min(1000, Math.max(1, opts.pageSize ?? 1000));

  /** Runs one operation under its deadline; failures become StoreUnavailableError or InternalError. */
  async function op<T>(what: string, fn: (signal: AbortSignal) => Promise<T>, missing?: () => T): Promise<T> {
    const deadline = AbortSignal.timeout(opts.timeout);
    try {
      return await fn(deadline);
    } catch (e) {
      if (e instanceof StoreUnavailableError) throw e;
      if (missing && isMissingKey(e) && !deadline.aborted) return missing();
      throw storeError(e, what, where, deadline.aborted);
    }
  }

  return {
    kind: 's3',
    where,
    async put(key, body) {
      checkBlobKey(key);
      await op(`PUT ${key}`, async (abortSignal) => {
        const { client, sdk } = await s3();
        return client.send(new sdk.PutObjectCommand({ Bucket: bucket, Key: base + key, Body: body, ContentLength: body.byteLength }), { abortSignal });
      });
    },
    async get(key) {
      checkBlobKey(key);
      return op(
        `GET ${key}`,
        async (abortSignal) => {
          const { client, sdk } = await s3();
          const res = await client.send(new sdk.GetObjectCommand({ Bucket: bucket, Key: base + key }), { abortSignal });
          if (!res.Body) throw new StoreUnavailableError(`the checkpoint store ${where} answered GET ${key} without a body`);
          const bytes = await res.Body.transformToByteArray();
          if (res.ContentLength !== undefined && bytes.byteLength !== res.ContentLength)
            throw new StoreUnavailableError(`the checkpoint store ${where} cut GET ${key} short (${bytes.byteLength} of ${res.ContentLength} bytes)`);
          return bytes;
        },
        () => null,
      );
    },
    async has(key) {
      checkBlobKey(key);
      return op(
        `HEAD ${key}`,
        async (abortSignal) => {
          const { client, sdk } = await s3();
          await client.send(new sdk.HeadObjectCommand({ Bucket: bucket, Key: base + key }), { abortSignal });
          return true;
        },
        () => false,
      );
    },
    async *list(listPrefix) {
      if (listPrefix !== '') checkBlobKey(listPrefix.endsWith('/') ? listPrefix.slice(0, -1) : listPrefix, 'prefix');
      let token: string | undefined;
      do {
        const page: ListObjectsV2CommandOutput = await op(`LIST ${listPrefix || '(all)'}`, async (abortSignal) => {
          const { client, sdk } = await s3();
          return client.send(new sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: base + listPrefix, MaxKeys: pageSize, ContinuationToken: token }), {
            abortSignal,
          });
        });
        for (const o of page.Contents ?? []) {
          const key = o.Key?.startsWith(base) ? o.Key.slice(base.length) : '';
          // an object the layer above did not write (another tool's, a folder marker) is not a blob
          if (key && key.split('/').every((s) => SEGMENT.test(s) && s !== '.' && s !== '..')) yield { key, size: o.Size ?? 0 };
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
        if (page.IsTruncated && !token) throw new StoreUnavailableError(`the checkpoint store ${where} cut a listing short without a continuation token`);
      } while (token);
    },
    async delete(key) {
      checkBlobKey(key);
      await op(
        `DELETE ${key}`,
        async (abortSignal) => {
          const { client, sdk } = await s3();
          return client.send(new sdk.DeleteObjectCommand({ Bucket: bucket, Key: base + key }), { abortSignal });
        },
        () => undefined,
      );
    },
    async close() {
      made?.client.destroy();
    },
  };
}
