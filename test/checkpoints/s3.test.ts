// The S3 blob store (src/checkpoints/s3.ts) against a real S3 server: Ceph's RADOS Gateway on a
// one-node cluster the test starts (test/helpers/s3.ts).
//   - the blob store contract (test/helpers/blobcontract.ts), 1100 keys listed over two S3 pages;
//   - a listing in pages of 7; stores under different prefixes of one bucket never see each
//     other's blobs; objects another tool put there (a folder marker, a name with a space) are
//     not listed as blobs; `where` is s3://bucket/prefix and holds no credential;
//   - the gateway killed: every operation fails as StoreUnavailableError within a second or two
//     (connection refused, after the client's retries), and the same store works again once it
//     is started again; the gateway frozen (SIGSTOP: connections accepted, never answered): the
//     operation fails as StoreUnavailableError at the store's deadline, and works after SIGCONT;
//   - wrong credentials or a missing bucket: the host's own error (InternalError, not a retryable
//     store_unavailable) whose message and cause never hold the secret key.

import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { StoreUnavailableError, type BlobStore } from '../../src/checkpoints/blobs.js';
import { openS3BlobStore, type S3StoreOptions } from '../../src/checkpoints/s3.js';
import { InternalError, errorFields } from '../../src/errors.js';
import { blobContract } from '../helpers/blobcontract.js';
import { startS3, type TestS3 } from '../helpers/s3.js';

let s3: TestS3;
let bucket: string;
let store: BlobStore;
const opened: BlobStore[] = [];

const settings = (over: Partial<S3StoreOptions> = {}): S3StoreOptions => ({
  endpoint: s3.endpoint,
  region: 'us-east-1',
  connectTimeout: 2000,
  timeout: 10_000,
  maxConnections: 16,
  maxAttempts: 3,
  env: s3.env,
  ...over,
});
const open = (url: string, over: Partial<S3StoreOptions> = {}) => {
  const s = openS3BlobStore(url, settings(over));
  opened.push(s);
  return s;
};
const keys = async (s: BlobStore, prefix = '') => {
  const out: string[] = [];
  for await (const { key } of s.list(prefix)) out.push(key);
  return out.sort();
};
/** The error `p` rejects with, and how long it took. */
const failure = async (p: Promise<unknown>) => {
  const t0 = Date.now();
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  return { e, ms: Date.now() - t0 };
};

test.before(async () => {
  s3 = await startS3();
  bucket = await s3.bucket();
  store = open(`s3://${bucket}/box/checkpoints`);
});
test.after(async () => {
  for (const s of opened) await s.close();
  await s3?.stop();
});

blobContract(test, () => store);

test('a listing in pages of 7 gives every key once', async () => {
  const small = open(`s3://${bucket}/paged`, { pageSize: 7 });
  const want = Array.from({ length: 30 }, (_, i) => `chunks/${String(i).padStart(2, '0')}`);
  for (const k of want) await small.put(k, Uint8Array.from([1]));
  assert.equal(await keys(small, 'chunks/'), want);
  assert.equal(await keys(small), want);
});

test('stores under different prefixes of one bucket are apart; objects not put as blobs are not listed', async () => {
  const a = open(`s3://${bucket}/host-a`);
  const b = open(`s3://${bucket}/host-a2/`);
  const root = open(`s3://${bucket}`);
  await a.put('manifests/s/1', Uint8Array.from([1]));
  await b.put('manifests/s/2', Uint8Array.from([2]));
  assert.equal(await keys(a), ['manifests/s/1']);
  assert.equal(await keys(b), ['manifests/s/2']);
  assert.is(await a.get('manifests/s/2'), null);
  const raw = await s3.client().send(new GetObjectCommand({ Bucket: bucket, Key: 'host-a/manifests/s/1' }));
  assert.equal([...(await raw.Body!.transformToByteArray())], [1], 'a blob is the object <prefix>/<key>');
  for (const k of ['host-a/', 'host-a/with space', 'host-a/manifests//x']) await s3.client().send(new PutObjectCommand({ Bucket: bucket, Key: k, Body: 'x' }));
  assert.equal(await keys(a), ['manifests/s/1']);
  assert.ok((await keys(root, 'host-a/')).includes('host-a/manifests/s/1'), 'a store on the bucket root lists it under its full name');
  assert.is(a.kind, 's3');
  assert.is(a.where, `s3://${bucket}/host-a`);
  assert.is(b.where, `s3://${bucket}/host-a2`);
});

test('the gateway killed: StoreUnavailableError within seconds for every operation; the same store works once it is back', async () => {
  await store.put('before/kill', Uint8Array.from([5]));
  await s3.killRgw();
  try {
    const ops: [string, () => Promise<unknown>][] = [
      ['put', () => store.put('during/kill', Uint8Array.from([1]))],
      ['get', () => store.get('before/kill')],
      ['has', () => store.has('before/kill')],
      ['delete', () => store.delete('before/kill')],
      ['list', () => keys(store, 'before/')],
    ];
    for (const [name, call] of ops) {
      const { e, ms } = await failure(call());
      assert.ok(e instanceof StoreUnavailableError, `${name}: ${String(e)}`);
      assert.ok(ms < 5000, `${name} failed in ${ms} ms`);
      assert.not.match(JSON.stringify(errorFields(e)), s3.secretAccessKey);
    }
  } finally {
    await s3.startRgw();
  }
  assert.equal([...(await store.get('before/kill'))!], [5], 'the blob survived and the store reconnects');
  await store.put('after/kill', Uint8Array.from([6]));
  assert.equal(await keys(store, 'after/'), ['after/kill']);
});

test('the gateway frozen (accepts, never answers): StoreUnavailableError at the deadline; works after it resumes', async () => {
  const quick = open(`s3://${bucket}/frozen`, { timeout: 1500, maxAttempts: 2 });
  await quick.put('k', Uint8Array.from([1, 2]));
  s3.pauseRgw();
  try {
    for (const [name, call] of [
      ['get', () => quick.get('k')],
      ['put', () => quick.put('k2', Uint8Array.from([3]))],
      ['list', () => keys(quick)],
    ] as const) {
      const { e, ms } = await failure(call());
      assert.ok(e instanceof StoreUnavailableError, `${name}: ${String(e)}`);
      assert.ok(ms >= 1400 && ms < 4000, `${name} failed after ${ms} ms (deadline 1500)`);
      assert.match((e as Error).message, /timed out/);
    }
  } finally {
    s3.contRgw();
  }
  assert.equal([...(await quick.get('k'))!], [1, 2]);
});

test('wrong credentials or a missing bucket: the host error, never store_unavailable, no secret in it', async () => {
  const wrongSecret = 'Wr0ngSecretKeyThatMustNeverBeLogged000000';
  const wrong = open(`s3://${bucket}/x`, { env: { AWS_ACCESS_KEY_ID: s3.accessKeyId, AWS_SECRET_ACCESS_KEY: wrongSecret } });
  const noBucket = open(`s3://no-such-bucket-${Date.now()}/x`);
  for (const [name, call] of [
    ['put with a wrong secret', () => wrong.put('k', Uint8Array.from([1]))],
    ['get with a wrong secret', () => wrong.get('k')],
    ['put into a missing bucket', () => noBucket.put('k', Uint8Array.from([1]))],
    ['list of a missing bucket', () => keys(noBucket)],
  ] as const) {
    const { e } = await failure(call());
    assert.ok(e instanceof InternalError, `${name}: ${String(e)}`);
    const logged = JSON.stringify(errorFields(e));
    assert.not.ok(logged.includes(wrongSecret) || logged.includes(s3.secretAccessKey), `${name}: no secret in ${logged}`);
  }
});

test.run();
