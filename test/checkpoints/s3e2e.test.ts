// Checkpoints end to end with the S3 store (issue 37): a real daemon whose `checkpoints.store` is
// s3://bucket/box on a real Ceph RGW (test/helpers/s3.ts), its credentials in the daemon's
// environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), and a real runc server behind the API:
//   - a 50 MB random file survives checkpoint → change → restore byte-exact (sha256);
//   - 10 checkpoints of a server changing 10 MiB between each store at most 1.3× (the first
//     checkpoint + 9 × 10 MiB) in the bucket (the sum of the object sizes S3 lists);
//   - a chunk overwritten in the bucket (through the S3 client) refuses the restore: 502
//     checkpoint_corrupt, and the server keeps its disk and keeps running;
//   - the gateway killed: a checkpoint answers 503 store_unavailable with Retry-After while the
//     server keeps serving (HTTP through the edge, and its disk still writable: not left frozen);
//     once the gateway is back a checkpoint works again.

import { randomBytes } from 'node:crypto';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type ListObjectsV2CommandOutput } from '@aws-sdk/client-s3';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startS3, type TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { send } from '../http/contract.js';
import { RUN_SH, sh } from '../runtime/helpers/env.js';

const MiB = 1024 * 1024;
const PREFIX = 'box';
let s3: TestS3;
let bucket = '';
let d: TestDaemon;
let id = '';
let key = '';
let host = '';
const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

test.before(async () => {
  s3 = await startS3();
  bucket = await s3.bucket();
  // the daemon's environment: where the S3 store reads its credentials, as every S3 tool does
  Object.assign(process.env, s3.env);
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 } },
    checkpoints: {
      store: `s3://${bucket}/${PREFIX}`,
      s3: { endpoint: s3.endpoint, connectTimeout: '2s', timeout: '20s', maxAttempts: 2 },
      manualPerServer: { anonymous: 20 }, // the test's server takes 10 + 4 manual checkpoints (the cap is checkpoints/auto's)
    },
  });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
  host = `${d.daemon.store.servers.get(id)!.slug}.localhost`;
});
test.after(async () => {
  await d?.stop();
  await s3?.stop();
  for (const [k, v] of [
    ['AWS_ACCESS_KEY_ID', saved.id],
    ['AWS_SECRET_ACCESS_KEY', saved.secret],
  ] as const)
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

const api = (method: string, path: string, body?: unknown) =>
  send(d.http, 'api.localhost', method, path, { headers: { authorization: `Bearer ${key}` }, ...(body === undefined ? {} : { body }) });
/** A command in the server (as root); its stdout, trimmed. */
const inServer = async (script: string, input?: string) => {
  const r = await sh(d.daemon.runtime, id, script, input);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out.trim();
};
const sha = (path: string) => inServer(`sha256sum ${path} | cut -d' ' -f1`);
const checkpoint = async (comment?: string) => {
  const c = await api('POST', `/servers/${id}/checkpoints`, comment ? { comment } : {});
  assert.is(c.status, 201, c.text);
  return c.json.id as string;
};

/** Every object in the bucket under the store's prefix: key → size. */
async function objects(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let token: string | undefined;
  do {
    const page: ListObjectsV2CommandOutput = await s3
      .client()
      .send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${PREFIX}/`, ContinuationToken: token }));
    for (const o of page.Contents ?? []) out.set(o.Key!, o.Size ?? 0);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return out;
}
const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
const chunkKeys = (m: Map<string, number>) => [...m.keys()].filter((k) => k.startsWith(`${PREFIX}/chunks/`));

test('a 50 MB random file survives checkpoint → change → restore byte-exact', async () => {
  const want = await inServer('head -c 50000000 /dev/urandom > /root/big && sync && sha256sum /root/big | cut -d" " -f1');
  const before = await objects();
  const cid = await checkpoint('before the change');
  const after = await objects();
  assert.ok(total(after) - total(before) >= 50_000_000, `the bucket grew by ${total(after) - total(before)} bytes`);

  await inServer('head -c 1000 /dev/urandom > /root/big && echo new > /root/later && sync');
  assert.is.not(await sha('/root/big'), want);
  const r = await api('POST', `/servers/${id}/restore`, { checkpoint: cid });
  assert.is(r.status, 200, r.text);
  assert.is(await sha('/root/big'), want);
  assert.is(await inServer('test -e /root/later; echo $?'), '1');
});

test('10 checkpoints of a server changing 10 MiB between each store ≤ 1.3× (first + 9 × 10 MiB) in the bucket', async () => {
  await inServer('rm -f /root/big && head -c 41943040 /dev/urandom > /root/data && sync');
  const start = total(await objects());
  await checkpoint('series 0');
  const first = total(await objects()) - start;
  for (let i = 1; i < 10; i++) {
    // 10 MiB of new bytes over a region of the file, in place
    await inServer(`head -c ${10 * MiB} /dev/urandom | dd of=/root/data bs=1M seek=${(i % 4) * 10} conv=notrunc status=none && sync`);
    await checkpoint(`series ${i}`);
  }
  const stored = total(await objects()) - start;
  const bound = 1.3 * (first + 9 * 10 * MiB);
  console.log(
    `  10 checkpoints, 10 MiB changed between each: ${(stored / MiB).toFixed(1)} MiB in the bucket (first ${(first / MiB).toFixed(1)} MiB; bound ${(bound / MiB).toFixed(1)} MiB)`,
  );
  assert.ok(
    stored <= bound,
    `10 checkpoints stored ${(stored / MiB).toFixed(1)} MiB > ${(bound / MiB).toFixed(1)} MiB (first ${(first / MiB).toFixed(1)} MiB)`,
  );
  assert.ok(stored >= 9 * 10 * MiB, `stored ${stored}: the changes were not all stored`);
  const list = await api('GET', `/servers/${id}/checkpoints`);
  assert.ok(list.json.checkpoints.length >= 11, String(list.json.checkpoints.length));
});

test('a chunk overwritten in the bucket refuses the restore (502 checkpoint_corrupt); the server keeps its disk', async () => {
  await inServer('head -c 4194304 /dev/urandom > /root/unique && sync');
  const before = new Set(chunkKeys(await objects()));
  const cid = await checkpoint('to be damaged');
  const fresh = chunkKeys(await objects()).filter((k) => !before.has(k));
  assert.ok(fresh.length >= 4, `the checkpoint's own chunks: ${fresh.length}`);
  // one of its chunks overwritten with bytes of the same length
  const victim = fresh[0];
  const got = await s3.client().send(new GetObjectCommand({ Bucket: bucket, Key: victim }));
  const len = (await got.Body!.transformToByteArray()).byteLength;
  await s3.client().send(new PutObjectCommand({ Bucket: bucket, Key: victim, Body: randomBytes(len) }));

  await inServer('echo after > /root/after-damage && sync');
  const data = await sha('/root/data');
  const r = await api('POST', `/servers/${id}/restore`, { checkpoint: cid });
  assert.is(r.status, 502, r.text);
  assert.is(r.json.error, 'checkpoint_corrupt');
  assert.not.ok(r.text.includes(d.dataDir), 'no host path in the answer');
  assert.is(await inServer('cat /root/after-damage'), 'after');
  assert.is(await sha('/root/data'), data);
  assert.is(d.daemon.runtime.get(id)?.state, 'running');
});

test('the gateway killed: a checkpoint answers 503 store_unavailable with Retry-After; the server keeps serving', async () => {
  await inServer('mkdir -p /root/www && echo hello > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh', RUN_SH);
  const page = () => send(d.http, host, 'GET', '/').then((r) => (r.status === 200 ? r.text : null));
  assert.is((await until('the app through the edge', page, 30_000, 100)).trim(), 'hello');

  await s3.killRgw();
  try {
    const c = await api('POST', `/servers/${id}/checkpoints`, { comment: 'store away' });
    assert.is(c.status, 503, c.text);
    assert.is(c.json.error, 'store_unavailable');
    assert.ok(Number(c.headers['retry-after']) > 0, `Retry-After: ${c.headers['retry-after']}`);
    assert.not.ok(c.text.includes(s3.endpoint.replace('http://', '')), 'the store address is not shown');
    // the server serves and its disk takes writes (it was thawed)
    assert.is((await page())?.trim(), 'hello');
    assert.is(await inServer('echo during > /root/during && sync && cat /root/during'), 'during');
    assert.is(d.daemon.runtime.get(id)?.state, 'running');
  } finally {
    await s3.startRgw();
  }
  const again = await checkpoint('store back');
  assert.match(again, /^ckp_/);
});

test.run();
