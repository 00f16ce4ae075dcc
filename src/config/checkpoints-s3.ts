// Where checkpoints are stored (issue 37), the S3 part of the checkpoints slice: `checkpoints.store`
// (unset: the directory <dataDir>/checkpoints; `s3://bucket/prefix`: any S3-compatible object
// store) and how the S3 client reaches it. The credentials are never config: the S3 backend reads
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment, as every
// S3 tool does. The engine's own keys (interval, retention) sit beside these under `checkpoints`.

import { z } from 'zod';
import type { EnvBinding } from './env.js';
import { duration } from './fields.js';

/** s3://bucket or s3://bucket/prefix/parts: a DNS-style bucket name (3–63 characters) and
 *  segments of [A-Za-z0-9._-]; no credentials, query or other scheme. */
export const S3_STORE_URL = /^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/[A-Za-z0-9._-]+)*\/?$/;

const s3Schema = z
  .strictObject({
    endpoint: z
      .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
      .refine((u) => !/^https?:\/\/[^/]*@/.test(u), 'must not hold credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)')
      .optional()
      .describe(
        'URL of an S3-compatible object store (Cloudflare R2, Backblaze B2, Ceph RGW, Garage: e.g. https://<account>.r2.cloudflarestorage.com); requests then use path-style addressing (https://endpoint/bucket/key). Unset: AWS S3 itself, in `region`.',
      ),
    region: z
      .string()
      .regex(/^[a-z0-9-]{1,64}$/, 'must be a region name like us-east-1 (R2: auto)')
      .default('us-east-1')
      .describe("Region the store's requests are signed for (AWS: the bucket's region; R2: auto; most others accept any)."),
    connectTimeout: duration()
      .prefault('5s')
      .describe('Longest a connection to the object store may take to open; past it the operation counts as a store that cannot be reached.'),
    timeout: duration()
      .prefault('60s')
      .describe(
        "Longest one store operation (a blob's upload or download, a HEAD, a page of a listing, a delete), its retries included, may take, and longest a connection may stay silent; past it the operation fails as `store_unavailable` and the checkpoint is retried later.",
      ),
    maxConnections: z.coerce
      .number()
      .int()
      .min(1)
      .max(256)
      .default(16)
      .describe('Connections the daemon keeps open to the object store at most (kept alive); further requests wait for one.'),
    maxAttempts: z.coerce
      .number()
      .int()
      .min(1)
      .max(10)
      .default(3)
      .describe(
        "Tries of one request the S3 client makes (the first included) on a connection error, a 5xx or throttling (SlowDown), with the client's back-off between them, within `timeout`.",
      ),
  })
  .prefault({});

/** The store keys of the `checkpoints` slice, spread into its object. */
export const checkpointStoreShape = {
  store: z
    .string()
    .regex(S3_STORE_URL, 'must be s3://bucket or s3://bucket/prefix (set the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)')
    .optional()
    .describe(
      'Where checkpoints are stored. Unset: the directory <dataDir>/checkpoints on this host. `s3://bucket/prefix`: an S3-compatible object store (AWS S3, Cloudflare R2, Backblaze B2, Ceph RGW, Garage; `checkpoints.s3.endpoint` for one that is not AWS), its credentials read from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) as every S3 tool reads them, never logged. Chunks are encrypted on this host before they are uploaded.',
    ),
  s3: s3Schema,
};

export type CheckpointS3Config = z.output<typeof s3Schema>;

export const checkpointStoreEnv: EnvBinding[] = [
  { env: 'ROOTBOX_CHECKPOINT_STORE', path: 'checkpoints.store' },
  { env: 'ROOTBOX_S3_ENDPOINT', path: 'checkpoints.s3.endpoint' },
  { env: 'ROOTBOX_S3_REGION', path: 'checkpoints.s3.region', fallback: 'AWS_REGION' },
];
