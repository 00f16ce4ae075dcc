// bench/checkpoints/s3put.ts: upload throughput of the S3 blob store (src/checkpoints/s3.ts) —
// many 1 MiB blobs (a checkpoint's chunks) put with bounded concurrency — beside the same S3
// client's raw PutObject of one large object of the same bytes (the floor a checkpoint upload is
// held to: issue 37 wants ≥ 0.8×). Random (incompressible) bytes; rounds alternate blob store and
// raw PUT so load from the rest of the machine falls on both; each side's median is compared.
// The store is a one-node Ceph RGW started for the run (test/helpers/s3.ts), or the store of
// --endpoint/--bucket with the credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
//   node --import tsx bench/checkpoints/s3put.ts [--mib 256] [--concurrency 16] [--rounds 3]
//        [--endpoint http://host:port --bucket name --region us-east-1]

import { randomBytes } from 'node:crypto';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { makeS3Client, openS3BlobStore, type S3StoreOptions } from '../../src/checkpoints/s3.js';
import { startS3, type TestS3 } from '../../test/helpers/s3.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const MiB = 1024 * 1024;
const total = Number(arg('mib', '256'));
const concurrency = Number(arg('concurrency', '16'));
const rounds = Number(arg('rounds', '3'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const row = (label: string, value: string) => console.log(`${label.padEnd(46)}${value}`);

let s3: TestS3 | undefined;
try {
  let endpoint = arg('endpoint', '');
  let bucket = arg('bucket', '');
  let env: NodeJS.ProcessEnv = process.env;
  if (!endpoint) {
    const t0 = Date.now();
    s3 = await startS3();
    row('Ceph RGW (one node) ready in', `${((Date.now() - t0) / 1000).toFixed(1)} s`);
    endpoint = s3.endpoint;
    bucket = await s3.bucket();
    env = s3.env;
  }
  const opts: S3StoreOptions = {
    endpoint,
    region: arg('region', 'us-east-1'),
    connectTimeout: 5000,
    timeout: 120_000,
    maxConnections: concurrency,
    maxAttempts: 3,
    env,
  };
  const store = openS3BlobStore(`s3://${bucket}/bench`, opts);
  const raw = await makeS3Client(opts);
  const bytes = randomBytes(total * MiB);
  const blobs = Array.from({ length: total }, (_, i) => bytes.subarray(i * MiB, (i + 1) * MiB));

  /** MiB/s of putting every blob, `concurrency` in flight. */
  const viaStore = async (round: number) => {
    const t0 = process.hrtime.bigint();
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        for (let i = next++; i < blobs.length; i = next++) await store.put(`r${round}/chunks/${String(i).padStart(6, '0')}`, blobs[i]);
      }),
    );
    return total / (Number(process.hrtime.bigint() - t0) / 1e9);
  };
  /** MiB/s of one PutObject of all the bytes. */
  const viaRaw = async (round: number) => {
    const t0 = process.hrtime.bigint();
    await raw.send(new PutObjectCommand({ Bucket: bucket, Key: `bench-raw/r${round}`, Body: bytes, ContentLength: bytes.byteLength }));
    return total / (Number(process.hrtime.bigint() - t0) / 1e9);
  };

  await viaStore(-1); // warm-up: connections, the bucket index
  await viaRaw(-1);
  const storeRates: number[] = [];
  const rawRates: number[] = [];
  for (let r = 0; r < rounds; r++) {
    rawRates.push(await viaRaw(r));
    storeRates.push(await viaStore(r));
  }
  const fmt = (xs: number[]) => `${median(xs).toFixed(0).padStart(5)} MiB/s median   (${xs.map((x) => x.toFixed(0)).join(', ')})`;
  row(`raw PutObject, one ${total} MiB object`, fmt(rawRates));
  row(`blob store, ${total} × 1 MiB, ${concurrency} at once`, fmt(storeRates));
  const ratio = median(storeRates) / median(rawRates);
  row('ratio blob store / raw PUT (goal ≥ 0.8)', `${ratio.toFixed(2)}×  ${ratio >= 0.8 ? 'ok' : 'BELOW GOAL'}`);
  await store.close();
  raw.destroy();
} finally {
  await s3?.stop();
}
