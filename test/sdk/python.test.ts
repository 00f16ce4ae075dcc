// The Python SDK (sdk/python) against a real daemon with real runc servers: python3 runs the
// SDK's own live tests (sdk/python/tests/test_live.py, unittest) against this daemon — Flow
// (anonymous create, exec with streamed output, timeout and stdin, a 20 MB file byte-exact,
// tar both ways, url, expose, logs, restart, typed 401/404, checkpoint → change → restore, fork),
// then, once this file used up the account's grant, Exhausted (402 as PaymentRequiredError with the recharge URL, delete) — and
// the README's quick start, run as printed over HTTPS with the daemon's CA.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

const repo = new URL('../../', import.meta.url).pathname;
const sdk = join(repo, 'sdk', 'python');
const HOUR = 3_600_000;
let d: TestDaemon;
const work = mkdtempSync(join(tmpdir(), 'rbx-sdkpy-'));

test.before(async () => {
  d = await startTestDaemon({ billing: { grantRamGbHours: 0.001, meterInterval: '1h' }, hosting: { rateLimit: { createsPerIpPerHour: 1000 } } });
  if (!d.containers) throw new Error('this file needs the runc runtime');
  writeFileSync(join(work, 'ca.pem'), d.ca);
});
test.after(async () => {
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** python3 with the SDK's source on its path, asynchronously (the daemon answering it runs in this process). */
function python(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn('python3', args, {
      cwd: sdk,
      env: { PATH: process.env.PATH, PYTHONPATH: join(sdk, 'src'), PYTHONDONTWRITEBYTECODE: '1', HOME: work, ...env },
      timeout: 300_000,
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (c) => (out += c));
    p.stderr.on('data', (c) => (err += c));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, out, err }));
  });
}

const live = { ROOTBOX_BASE_URL: '', ROOTBOX_TEST_STATE: '' };

test("the SDK's live tests: create, exec, files, url, expose, logs, restart, typed errors, checkpoints, key rotation", async () => {
  Object.assign(live, { ROOTBOX_BASE_URL: `http://api.localhost:${d.http}`, ROOTBOX_TEST_STATE: join(work, 'state.json') });
  const r = await python(['-m', 'unittest', '-v', 'tests.test_live.Flow'], live);
  assert.is(r.code, 0, r.err);
  // every test of the class ran and passed (unittest's summary on stderr)
  assert.match(r.err, /Ran 10 tests/);
  assert.match(r.err, /\nOK\n?$/);
});

test("the README's quick start runs as printed (over HTTPS with the daemon's CA)", async () => {
  const readme = readFileSync(join(sdk, 'README.md'), 'utf8');
  const m = /## Quick start\n\n```python\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, 'no quick start');
  assert.is(m[1].trim().split('\n').length, 5, 'five lines');
  writeFileSync(join(work, 'quick.py'), m[1].replaceAll(':8443', `:${d.https}`));
  const before = d.daemon.store.servers.all().length;
  const r = await python([join(work, 'quick.py')], { SSL_CERT_FILE: join(work, 'ca.pem') });
  assert.is(r.code, 0, r.err);
  assert.match(r.out, /^Linux /);
  assert.is(d.daemon.store.servers.all().length, before, 'its server was deleted');
});

test('a used-up grant is a PaymentRequiredError with the recharge URL; delete still works', async () => {
  let clock = Date.now() + HOUR;
  await d.daemon.billing.tick((clock += HOUR));
  await d.daemon.billing.tick((clock += 3 * HOUR));
  const r = await python(['-m', 'unittest', '-v', 'tests.test_live.Exhausted'], live);
  assert.is(r.code, 0, r.err);
  assert.match(r.err, /Ran 1 test/);
  assert.is(d.daemon.runtime.list().length, 0);
});

test.run();
