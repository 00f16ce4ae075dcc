// The contract every BlobStore backend keeps (src/checkpoints/blobs.ts), as tests any backend's
// file registers on its own suite: blobContract(test, () => store). Binary blobs round-trip byte
// for byte (empty, every byte value, MiBs of random bytes); a blob is the bytes put, not a view of
// the caller's array; a key put again is replaced; a missing key is null / false and deleting it
// is no error; list() finds exactly the keys under a prefix with their sizes, across many pages;
// keys that are not relative [A-Za-z0-9._-] segments are refused and write nothing. Each test
// works under a prefix of its own, so the store may be shared with other tests.

import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { Test } from 'uvu';
import * as assert from 'uvu/assert';
import { StoreUnavailableError, type BlobStore } from '../../src/checkpoints/blobs.js';

export interface ContractOptions {
  /** Keys the many-keys listing puts (default 1100: more than one S3 page of 1000). */
  manyKeys?: number;
  /** Puts in flight at once while filling it. */
  concurrency?: number;
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const ns = () => `t-${randomUUID().slice(0, 8)}`;

async function listAll(store: BlobStore, prefix: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const { key, size } of store.list(prefix)) {
    assert.not.ok(out.has(key), `list gave ${key} twice`);
    out.set(key, size);
  }
  return out;
}

/** Runs `fn` over `items`, `n` at a time. */
async function pool<T>(items: T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]);
    }),
  );
}

export function blobContract(test: Test, store: () => BlobStore, opts: ContractOptions = {}): void {
  const many = opts.manyKeys ?? 1100;
  const concurrency = opts.concurrency ?? 16;

  test('blob contract: binary blobs round-trip byte for byte (empty, every byte value, 1 and 5 MiB random)', async () => {
    const p = ns();
    const every = Uint8Array.from({ length: 256 }, (_, i) => i);
    const blobs: [string, Uint8Array][] = [
      [`${p}/empty`, new Uint8Array(0)],
      [`${p}/bytes`, every],
      [`${p}/chunks/ab/${'ab'.repeat(32)}`, randomBytes(1 << 20)],
      [`${p}/big.bin`, randomBytes(5 << 20)],
    ];
    for (const [k, b] of blobs) await store().put(k, b);
    for (const [k, b] of blobs) {
      const got = await store().get(k);
      assert.ok(got instanceof Uint8Array, `${k} is bytes`);
      assert.is(got!.byteLength, b.byteLength, `${k} length`);
      assert.is(sha(got!), sha(b), `${k} bytes`);
      assert.ok(await store().has(k), `${k} exists`);
    }
  });

  test('blob contract: a stored blob is the bytes put, not the caller array; a key put again is replaced', async () => {
    const k = `${ns()}/manifests/srv/cp1`;
    const body = Uint8Array.from([1, 2, 3, 4]);
    await store().put(k, body);
    body.fill(9);
    assert.equal([...(await store().get(k))!], [1, 2, 3, 4]);
    await store().put(k, Uint8Array.from([7, 7]));
    assert.equal([...(await store().get(k))!], [7, 7]);
    assert.equal([...(await listAll(store(), k))], [[k, 2]]);
  });

  test('blob contract: a missing key is null / false; delete removes; deleting a missing key is no error', async () => {
    const p = ns();
    assert.is(await store().get(`${p}/none`), null);
    assert.is(await store().has(`${p}/none`), false);
    await store().delete(`${p}/none`);
    await store().put(`${p}/a`, Uint8Array.from([0]));
    await store().put(`${p}/b`, Uint8Array.from([1]));
    await store().delete(`${p}/a`);
    await store().delete(`${p}/a`);
    assert.is(await store().get(`${p}/a`), null);
    assert.is(await store().has(`${p}/a`), false);
    assert.equal([...(await store().get(`${p}/b`))!], [1], 'the other key stays');
    assert.equal([...(await listAll(store(), `${p}/`)).keys()], [`${p}/b`]);
  });

  test('blob contract: list gives exactly the keys under a prefix, with their sizes', async () => {
    const p = ns();
    const keys = { [`${p}/chunks/ab/1`]: 3, [`${p}/chunks/ab/2`]: 0, [`${p}/chunks/ac/1`]: 5, [`${p}/manifests/s/1`]: 7, [`${p}x/other`]: 1 };
    for (const [k, n] of Object.entries(keys)) await store().put(k, randomBytes(n));
    const under = (pre: string) => Object.fromEntries(Object.entries(keys).filter(([k]) => k.startsWith(pre)));
    for (const pre of [`${p}/`, `${p}/chunks/`, `${p}/chunks/a`, `${p}/chunks/ab/`, `${p}/manifests/`, `${p}/none/`])
      assert.equal(Object.fromEntries(await listAll(store(), pre)), under(pre), `list(${pre})`);
    assert.equal(Object.fromEntries(await listAll(store(), p)), keys, 'a prefix that is not a whole segment');
    const all = await listAll(store(), '');
    for (const [k, n] of Object.entries(keys)) assert.is(all.get(k), n, `list('') has ${k}`);
  });

  test(`blob contract: list of ${many} keys under one prefix (many pages) gives each once`, async () => {
    const p = ns();
    const keys = Array.from({ length: many }, (_, i) => `${p}/chunks/${String(i).padStart(5, '0')}`);
    await pool(keys, concurrency, (k) => store().put(k, Uint8Array.from([keys.indexOf(k) % 256])));
    const got = await listAll(store(), `${p}/`);
    assert.is(got.size, many);
    for (const k of keys) assert.is(got.get(k), 1, k);
    await pool(keys, concurrency, (k) => store().delete(k));
    assert.is((await listAll(store(), `${p}/`)).size, 0, 'all deleted');
  });

  test('blob contract: keys that are not relative [A-Za-z0-9._-] segments are refused and write nothing', async () => {
    const p = ns();
    const bad = [
      '',
      '/abs',
      `${p}/`,
      `${p}//x`,
      '../x',
      `${p}/../x`,
      `${p}/./x`,
      '.',
      '..',
      `${p}/a b`,
      `${p}/é`,
      `${p}/a\\b`,
      `${p}/a\0b`,
      `${p}/a?b`,
      `${p}/a%2fb`,
    ];
    for (const k of bad) {
      for (const [name, call] of [
        ['put', () => store().put(k, Uint8Array.from([1]))],
        ['get', () => store().get(k)],
        ['has', () => store().has(k)],
        ['delete', () => store().delete(k)],
      ] as const) {
        const e = await call().then(
          () => undefined,
          (err: unknown) => err,
        );
        assert.ok(e instanceof Error, `${name}(${JSON.stringify(k)}) refused`);
        assert.not.ok(e instanceof StoreUnavailableError, `${name}(${JSON.stringify(k)}) is not the store's failure`);
      }
    }
    for (const pre of ['/abs', '../', `${p}/../`, `${p}//`]) {
      const e = await listAll(store(), pre).then(
        () => undefined,
        (err: unknown) => err,
      );
      assert.ok(e instanceof Error, `list(${JSON.stringify(pre)}) refused`);
    }
    assert.is((await listAll(store(), p)).size, 0, 'nothing was written');
  });

  test('blob contract: concurrent puts and gets of different keys', async () => {
    const p = ns();
    const blobs = Array.from({ length: 24 }, (_, i) => [`${p}/c/${i}`, randomBytes(1000 + i * 997)] as const);
    await Promise.all(blobs.map(([k, b]) => store().put(k, b)));
    const got = await Promise.all(blobs.map(([k]) => store().get(k)));
    blobs.forEach(([k, b], i) => assert.is(sha(got[i]!), sha(b), k));
  });
}
