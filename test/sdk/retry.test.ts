// Retries only where the API says so, in both SDKs, against a real daemon (fast tier: its servers
// are processes) whose per-key limit is 60 requests a minute (a burst of 60, one more a second):
// once the burst is spent a call answered 429 with Retry-After is waited for and sent again
// (and succeeds), a client with maxRetries 0 gets the typed error with its code and retry_after,
// and one whose maxRetryWait is below the Retry-After gets it at once, without waiting.

import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Rootbox, RootboxError } from '../../sdk/js/src/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

const repo = new URL('../../', import.meta.url).pathname;
let d: TestDaemon;
let base = '';

test.before(async () => {
  d = await startTestDaemon({ hosting: { rateLimit: { perKeyPerMinute: 60, perIpPerMinute: 100_000 } } });
  base = `http://api.localhost:${d.http}`;
});
test.after(async () => {
  await d?.stop();
});

/** Spends the key's burst: calls with a client that never retries until one is answered 429. */
async function drain(apiKey: string): Promise<RootboxError> {
  const c = new Rootbox({ baseUrl: base, apiKey, maxRetries: 0 });
  try {
    for (let i = 0; i < 200; i++) {
      try {
        await c.credits();
      } catch (e) {
        assert.instance(e, RootboxError);
        return e as RootboxError;
      }
    }
    throw new Error('no 429 after 200 calls');
  } finally {
    c.close();
  }
}

test('TypeScript: a 429 with Retry-After is waited for and retried; maxRetries 0 and a short maxRetryWait throw the typed error', async () => {
  const rb = new Rootbox({ baseUrl: base });
  await rb.create();
  const key = rb.apiKey!;
  const e = await drain(key);
  assert.is(e.status, 429);
  assert.is(e.code, 'rate_limited');
  assert.ok(e.retryAfter !== undefined && e.retryAfter >= 1 && e.retryAfter <= 2, String(e.retryAfter));
  // the default client waits the Retry-After and succeeds
  const t0 = Date.now();
  assert.is((await rb.credits()).tier, 'anonymous');
  assert.ok(Date.now() - t0 >= 900, `answered after ${Date.now() - t0} ms: it did not wait`);
  // a Retry-After longer than maxRetryWait is the caller's, at once
  await drain(key);
  const impatient = new Rootbox({ baseUrl: base, apiKey: key, maxRetryWait: 0 });
  const t1 = Date.now();
  let thrown: unknown;
  await impatient.credits().catch((x: unknown) => (thrown = x));
  impatient.close();
  assert.instance(thrown, RootboxError);
  assert.is((thrown as RootboxError).code, 'rate_limited');
  assert.ok(Date.now() - t1 < 500, `${Date.now() - t1} ms`);
  rb.close();
});

test('Python: the same', async () => {
  const script = `
import sys, time, rootbox
base = sys.argv[1]
rb = rootbox.Rootbox(base_url=base)
rb.create()
def drain():
    c = rootbox.Rootbox(api_key=rb.api_key, base_url=base, max_retries=0)
    for _ in range(200):
        try:
            c.credits()
        except rootbox.RootboxError as e:
            return e
    raise AssertionError("no 429 after 200 calls")
e = drain()
assert (e.status, e.code) == (429, "rate_limited"), (e.status, e.code)
assert 1 <= e.retry_after <= 2, e.retry_after
t0 = time.monotonic()
assert rb.credits().tier == "anonymous"
assert time.monotonic() - t0 >= 0.9, "it did not wait"
drain()
t1 = time.monotonic()
try:
    rootbox.Rootbox(api_key=rb.api_key, base_url=base, max_retry_wait=0).credits()
    raise AssertionError("no error")
except rootbox.RootboxError as x:
    assert x.code == "rate_limited", x.code
assert time.monotonic() - t1 < 0.5
print("ok")
`;
  const r = await new Promise<{ code: number | null; out: string; err: string }>((resolve, reject) => {
    const p = spawn('python3', ['-c', script, base], {
      env: { PATH: process.env.PATH, PYTHONPATH: join(repo, 'sdk', 'python', 'src'), PYTHONDONTWRITEBYTECODE: '1' },
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (c) => (out += c));
    p.stderr.on('data', (c) => (err += c));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, out, err }));
  });
  assert.is(r.code, 0, r.err);
  assert.is(r.out.trim(), 'ok');
});

test.run();
