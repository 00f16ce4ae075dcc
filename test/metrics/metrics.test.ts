// The Prometheus endpoint against a real daemon: real traffic on the edge (hosting 200/404/401,
// a verify 402, a site answer) and a refused SSH login, then the metrics listener scraped over
// HTTP and its exposition parsed strictly; the counters moved by exactly the traffic made. The
// listener is on loopback by default and absent when "off".

import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loadConfig } from '../../src/config/index.js';
import { metricsReference, parseListen } from '../../src/metrics/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { parseExposition, sampleValue, type Family } from '../helpers/prom.js';
import { run } from '../helpers/run.js';
import { readFileSync } from 'node:fs';

let d: TestDaemon;
const keyDir = mkdtempSync(join(tmpdir(), 'rbx-metrics-key-'));

test.before(async () => {
  // payments and the LLM configured (nothing answers there: an unpaid call never reaches either)
  d = await startTestDaemon({
    verify: { llm: { baseUrl: 'http://127.0.0.1:9/v1', models: ['m'] }, x402: { payTo: '0x' + '3c'.repeat(20), facilitatorUrl: 'http://127.0.0.1:9/' } },
  });
});
test.after(async () => {
  await d?.stop();
  rmSync(keyDir, { recursive: true, force: true });
});

function get(port: number, host: string, path: string, method = 'GET', body?: string): Promise<{ status: number; body: string; type: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers: { host, ...(body ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      let b = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (b += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: b, type: String(res.headers['content-type'] ?? '') }));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
    req.end(body);
  });
}

async function scrape(): Promise<Map<string, Family>> {
  const r = await get(d.daemon.metrics.port, '127.0.0.1', '/metrics');
  assert.is(r.status, 200);
  assert.match(r.type, 'text/plain');
  return parseExposition(r.body);
}

test('the metrics listener binds 127.0.0.1 by default and "off" opens none', async () => {
  const defaults = loadConfig({ env: {}, file: undefined, overrides: { dataDir: keyDir } });
  assert.is(defaults.metrics.listen, '127.0.0.1:9464');
  assert.equal(parseListen(defaults.metrics.listen), { host: '127.0.0.1', port: 9464 });
  assert.is(parseListen('off'), undefined);
  assert.is(d.daemon.metrics.host, '127.0.0.1');
  assert.ok(d.daemon.metrics.port > 0);
  assert.throws(() => loadConfig({ env: {}, file: undefined, overrides: { dataDir: keyDir, metrics: { listen: 'everywhere' } } }));
  const env = loadConfig({ env: { ROOTBOX_METRICS_LISTEN: 'off' }, file: undefined, overrides: { dataDir: keyDir } });
  assert.is(env.metrics.listen, 'off');

  const off = await startTestDaemon({ metrics: { listen: 'off' } });
  try {
    assert.is(off.daemon.metrics.port, 0);
    // the daemon serves and counts without a listener
    assert.is((await get(off.http, 'api.localhost', '/healthz')).status, 200);
  } finally {
    await off.stop();
  }
  const other = await get(d.daemon.metrics.port, '127.0.0.1', '/other');
  assert.is(other.status, 404);
});

test('counters move by exactly the traffic made: HTTP by host kind and status, 402s, site latency, refused SSH logins', async () => {
  const before = await scrape();
  const http = (labels: Record<string, string>, fams = before) => sampleValue(fams, 'rootbox_http_requests_total', labels);

  assert.is((await get(d.http, 'api.localhost', '/healthz')).status, 200);
  assert.is((await get(d.http, 'api.localhost', '/healthz')).status, 200);
  assert.is((await get(d.http, 'api.localhost', '/no-such-route')).status, 404);
  assert.is((await get(d.http, 'api.localhost', '/servers')).status, 401);
  const paywalled = await get(d.http, 'verify.localhost', '/v1/verify/quick', 'POST', JSON.stringify({ artifact: 'hello' }));
  assert.is(paywalled.status, 402, paywalled.body);
  assert.is((await get(d.http, 'nosuch.localhost', '/')).status, 404);

  // a refused SSH login: a key no server has
  const key = join(keyDir, 'id');
  assert.is((await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key])).code, 0);
  const ssh = await run(
    'ssh',
    [
      '-F',
      '/dev/null',
      '-i',
      key,
      '-p',
      String(d.daemon.ssh.port),
      '-o',
      'BatchMode=yes',
      '-o',
      'IdentitiesOnly=yes',
      '-o',
      'PreferredAuthentications=publickey',
      '-o',
      'StrictHostKeyChecking=no',
      '-o',
      'UserKnownHostsFile=/dev/null',
      'root@127.0.0.1',
      'true',
    ],
    { timeoutMs: 15_000, env: { ...process.env, SSH_AUTH_SOCK: '' } },
  );
  assert.is(ssh.code, 255, ssh.stderr);

  const after = await scrape();
  const delta = (labels: Record<string, string>) => http(labels, after) - http(labels);
  assert.is(delta({ host: 'api', status: '200' }), 2);
  assert.is(delta({ host: 'api', status: '404' }), 1);
  assert.is(delta({ host: 'api', status: '401' }), 1);
  assert.is(delta({ host: 'verify', status: '402' }), 1);
  assert.is(delta({ host: 'site', status: '404' }), 1);
  const total = (f: Map<string, Family>) => f.get('rootbox_http_requests_total')!.samples.reduce((n, s) => n + s.value, 0);
  assert.is(total(after) - (before.has('rootbox_http_requests_total') ? total(before) : 0), 6);
  const moved = (f: Map<string, Family>, name: string, labels: Record<string, string> = {}) => sampleValue(f, name, labels);
  assert.is(moved(after, 'rootbox_payments_total', { outcome: 'required' }) - moved(before, 'rootbox_payments_total', { outcome: 'required' }), 1);
  assert.is(moved(after, 'rootbox_proxy_response_seconds_count') - moved(before, 'rootbox_proxy_response_seconds_count'), 1);
  assert.is(moved(after, 'rootbox_ssh_failed_logins_total') - moved(before, 'rootbox_ssh_failed_logins_total'), 1);
  assert.is(moved(after, 'rootbox_ssh_sessions_total') - moved(before, 'rootbox_ssh_sessions_total'), 0);
  assert.is(moved(after, 'rootbox_wakes_total', { result: 'ok' }), 0);

  // scrape-time gauges
  assert.is(after.get('rootbox_servers')!.type, 'gauge');
  assert.is(moved(after, 'rootbox_servers', { state: 'running' }), d.daemon.runtime.list().filter((s) => s.state === 'running').length);
  assert.ok(moved(after, 'rootbox_host_memory_available_bytes') > 0);
  assert.ok(moved(after, 'rootbox_host_disk_available_bytes') > 0);
  assert.ok(moved(after, 'rootbox_lmdb_size_bytes') > 0);
  assert.is(after.get('rootbox_proxy_response_seconds')!.type, 'histogram');
});

test('the parser refuses malformed exposition and inconsistent histograms', () => {
  const ok = '# HELP a_total x\n# TYPE a_total counter\na_total{k="v\\"q"} 3\n';
  assert.is(sampleValue(parseExposition(ok), 'a_total', { k: 'v"q' }), 3);
  const bad = [
    'a_total 1\n', // no TYPE
    '# TYPE a counter\na{k=v} 1\n', // unquoted
    '# TYPE a counter\na 1 2 3\n',
    '# TYPE a counter\na one\n',
    '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n', // not cumulative
    '# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n', // +Inf != count
    '# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_count 2\n', // no sum
    '# TYPE a counter\na 1', // no final newline
  ];
  for (const b of bad) assert.throws(() => parseExposition(b), JSON.stringify(b));
});

test('the README metrics reference is exactly what the registry documents', () => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const ref = metricsReference();
  assert.ok(readme.includes(`<!-- metrics:begin -->\n${ref}\n<!-- metrics:end -->`), 'README.md metrics reference is out of date: run `npm run docs`');
  for (const name of ['rootbox_http_requests_total', 'rootbox_wake_seconds', 'rootbox_llm_pass_seconds', 'rootbox_sms_sends_total', 'rootbox_lmdb_size_bytes'])
    assert.match(ref, name);
});

test.run();
