// How the S3 blob store (src/checkpoints/s3.ts) reads a store that misbehaves, through the real
// AWS SDK client against a local HTTP server that answers the way broken or busy stores do:
//   - 500, 503 SlowDown, 429, connections closed before any answer, an answer cut short, a 200
//     that is not S3 XML, silence past the deadline, nothing listening: StoreUnavailableError
//     (the API's 503 store_unavailable), the client's retries bounded by maxAttempts;
//   - 404 NoSuchKey / a HEAD's bare 404: null / false; 403 or NoSuchBucket: the host's own
//     InternalError, never retryable (a HEAD's 404 cannot tell a missing bucket: false);
//   - the store's config: s3:// URLs and the env bindings, credentials required from the
//     environment and never echoed. (The real-server behaviour is s3.test.ts, on Ceph RGW.)

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { StoreUnavailableError, type BlobStore } from '../../src/checkpoints/blobs.js';
import { openS3BlobStore, parseS3Url, type S3StoreOptions } from '../../src/checkpoints/s3.js';
import { loadConfig } from '../../src/config/index.js';
import { AppError, InternalError, errorFields } from '../../src/errors.js';
import { freePort } from '../helpers/ports.js';

const env = { AWS_ACCESS_KEY_ID: 'AKIATESTTESTTEST', AWS_SECRET_ACCESS_KEY: 'sEcReT/never+logged0000000000000000000000' };
type Handler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void;
let handler: Handler = (_q, res) => res.end();
let requests: string[] = [];
let server: Server;
let port: number;
const sockets = new Set<Socket>();

test.before(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      handler(req, res, Buffer.concat(chunks));
    });
  });
  server.on('connection', (s) => (sockets.add(s), s.on('close', () => sockets.delete(s))));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
test.after(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => server.close(r));
});

const opened: BlobStore[] = [];
function store(over: Partial<S3StoreOptions> = {}): BlobStore {
  requests = [];
  const s = openS3BlobStore('s3://bkt/pre', {
    endpoint: `http://127.0.0.1:${port}`,
    region: 'us-east-1',
    connectTimeout: 1000,
    timeout: 3000,
    maxConnections: 4,
    maxAttempts: 2,
    env,
    ...over,
  });
  opened.push(s);
  return s;
}
test.after.each(async () => {
  for (const s of opened.splice(0)) await s.close();
});

const xmlError = (res: ServerResponse, status: number, code: string) => {
  res.writeHead(status, { 'content-type': 'application/xml' });
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${code}</Message><RequestId>r1</RequestId></Error>`);
};

/** Every operation of `s`, each with the error it rejects with (undefined: it resolved). */
async function everyOp(s: BlobStore): Promise<[string, unknown, number][]> {
  const ops: [string, () => Promise<unknown>][] = [
    ['put', () => s.put('chunks/ab/1', Uint8Array.from([1, 2, 3]))],
    ['get', () => s.get('chunks/ab/1')],
    ['has', () => s.has('chunks/ab/1')],
    ['delete', () => s.delete('chunks/ab/1')],
    [
      'list',
      async () => {
        for await (const x of s.list('chunks/')) void x;
      },
    ],
  ];
  const out: [string, unknown, number][] = [];
  for (const [name, call] of ops) {
    const t0 = Date.now();
    out.push([
      name,
      await call().then(
        () => undefined,
        (e: unknown) => e,
      ),
      Date.now() - t0,
    ]);
  }
  return out;
}

function assertUnavailable(results: [string, unknown, number][], what: string, withinMs = 2500) {
  for (const [name, e, ms] of results) {
    assert.ok(e instanceof StoreUnavailableError, `${what}: ${name} gave ${String(e)}`);
    assert.ok(ms < withinMs, `${what}: ${name} took ${ms} ms`);
    const logged = JSON.stringify(errorFields(e));
    assert.not.ok(logged.includes(env.AWS_SECRET_ACCESS_KEY), `${what}: no secret in ${logged}`);
  }
}

test('5xx (500, 503 SlowDown) and 429 answers are store_unavailable, retried maxAttempts times', async () => {
  for (const [status, code] of [
    [500, 'InternalError'],
    [503, 'SlowDown'],
    [429, 'TooManyRequests'],
    [502, 'BadGateway'],
  ] as const) {
    handler = (req, res) => (req.method === 'HEAD' ? (res.writeHead(status), res.end()) : xmlError(res, status, code));
    const s = store({ maxAttempts: 2 });
    assertUnavailable(await everyOp(s), `${status} ${code}`);
    assert.is(requests.length, 10, `${status}: 5 operations × 2 attempts, got ${requests.join(', ')}`);
  }
  handler = (_q, res) => {
    res.writeHead(500, { 'content-type': 'text/html' });
    res.end('<html>oops</html>');
  };
  assertUnavailable(await everyOp(store({ maxAttempts: 1 })), '500 with an HTML body');
});

test('connections closed before an answer, or an answer cut short, are store_unavailable', async () => {
  handler = (req) => req.socket.destroy();
  assertUnavailable(await everyOp(store()), 'closed');
  handler = (req, res) => {
    res.writeHead(200, { 'content-length': '100', 'content-type': 'application/octet-stream' });
    res.write(Buffer.alloc(10));
    setTimeout(() => req.socket.destroy(), 20);
  };
  const [, e] = (await everyOp(store())).find(([n]) => n === 'get')!;
  assert.ok(e instanceof StoreUnavailableError, `a GET cut short: ${String(e)}`);
});

test('a 200 that is not S3 (a captive portal, a wrong endpoint) fails a listing as store_unavailable', async () => {
  handler = (_q, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<html><body>Welcome to the hotel wifi</body>');
  };
  const s = store();
  const e = await (async () => {
    for await (const x of s.list('')) void x;
  })().then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.ok(e instanceof StoreUnavailableError, String(e));
});

test('silence past the deadline and nothing listening are store_unavailable within bounded time', async () => {
  handler = () => {}; // never answers
  assertUnavailable(await everyOp(store({ timeout: 600 })), 'silent', 1500);
  const closed = openS3BlobStore('s3://bkt', {
    endpoint: `http://127.0.0.1:${await freePort()}`,
    region: 'us-east-1',
    connectTimeout: 1000,
    timeout: 3000,
    maxConnections: 2,
    maxAttempts: 3,
    env,
  });
  opened.push(closed);
  assertUnavailable(await everyOp(closed), 'refused');
});

test('404 NoSuchKey is null / false / a done delete; 403 and NoSuchBucket are the host error', async () => {
  handler = (req, res) => (req.method === 'HEAD' ? (res.writeHead(404), res.end()) : xmlError(res, 404, 'NoSuchKey'));
  const s = store();
  assert.is(await s.get('chunks/x'), null);
  assert.is(await s.has('chunks/x'), false);
  await s.delete('chunks/x');
  for (const [status, code] of [
    [403, 'AccessDenied'],
    [403, 'SignatureDoesNotMatch'],
    [404, 'NoSuchBucket'],
    [400, 'InvalidArgument'],
  ] as const) {
    handler = (_q, res) => xmlError(res, status, code);
    for (const [name, e] of await everyOp(store())) {
      if (name === 'has' && status === 404) continue; // a HEAD's 404 has no body to tell a missing bucket from a missing key
      assert.ok(e instanceof InternalError, `${code}: ${name} gave ${String(e)}`);
      assert.not.ok(JSON.stringify(errorFields(e)).includes(env.AWS_SECRET_ACCESS_KEY));
    }
  }
});

test('requests go to path-style URLs under the prefix, signed, with no SDK checksum headers', async () => {
  const seen: IncomingMessage[] = [];
  handler = (req, res) => {
    seen.push(req);
    res.writeHead(200, { etag: '"x"' });
    res.end();
  };
  await store().put('manifests/s1/c1', Uint8Array.from([1, 2, 3]));
  assert.is(new URL(seen[0].url!, 'http://x').pathname, '/bkt/pre/manifests/s1/c1');
  assert.is(seen[0].headers['content-length'], '3');
  assert.match(String(seen[0].headers.authorization), /^AWS4-HMAC-SHA256 Credential=AKIATESTTESTTEST\//);
  assert.not.ok(
    Object.keys(seen[0].headers).some((h) => h.startsWith('x-amz-checksum') || h === 'x-amz-sdk-checksum-algorithm'),
    JSON.stringify(seen[0].headers),
  );
});

test('config: checkpoints.store and checkpoints.s3 from the environment; bad URLs and missing credentials refused', () => {
  const cfg = loadConfig({
    env: { ROOTBOX_CHECKPOINT_STORE: 's3://my-bucket/box1', ROOTBOX_S3_ENDPOINT: 'https://acc.r2.cloudflarestorage.com', AWS_REGION: 'auto' },
  });
  assert.is(cfg.checkpoints.store, 's3://my-bucket/box1');
  assert.is(cfg.checkpoints.s3.endpoint, 'https://acc.r2.cloudflarestorage.com');
  assert.is(cfg.checkpoints.s3.region, 'auto');
  assert.is(cfg.checkpoints.s3.timeout, 60_000);
  const none = loadConfig({ env: {} });
  assert.is(none.checkpoints.store, undefined, 'unset: the directory store');
  for (const bad of ['s3://AB/x', 's3://b', 'http://bucket/x', 's3://key:secret@bucket/x', 's3://bucket/a b'])
    assert.throws(
      () => loadConfig({ env: { ROOTBOX_CHECKPOINT_STORE: bad } }),
      (e: unknown) => e instanceof AppError && e.code === 'config_invalid',
      bad,
    );
  assert.throws(
    () => loadConfig({ env: { ROOTBOX_S3_ENDPOINT: 'https://key:secret@host' } }),
    (e: unknown) => e instanceof AppError && !e.message.includes('secret@'),
  );
  assert.equal(parseS3Url('s3://bucket.name/a/b.c/'), { bucket: 'bucket.name', prefix: 'a/b.c' });
  assert.equal(parseS3Url('s3://bucket'), { bucket: 'bucket', prefix: '' });
  const e = (() => {
    try {
      openS3BlobStore('s3://bucket/x', {
        region: 'us-east-1',
        connectTimeout: 1000,
        timeout: 1000,
        maxConnections: 1,
        maxAttempts: 1,
        env: { AWS_ACCESS_KEY_ID: 'AKIA' },
      });
    } catch (err) {
      return err;
    }
  })();
  assert.ok(e instanceof AppError && e.code === 'config_invalid' && /AWS_SECRET_ACCESS_KEY/.test(e.message), String(e));
});

test.run();
