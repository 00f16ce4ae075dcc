#!/usr/bin/env node
// Runs test/**/*.test.ts files, each in its own Node process (uvu suites, TypeScript through
// tsx) under a time limit, and ends with one line `N passed, N failed`.
//
// Two tiers. The fast tier (UNIT below) needs neither root nor runc: pure tests, and daemon tests
// whose servers are plain processes (test/helpers/procruntime.ts; ROOTBOX_TEST_RUNTIME=process is
// set for these files, always). Every other file is a container test (real runc, root).
//   node scripts/test.mjs               every file (npm test)
//   node scripts/test.mjs --unit        the fast tier, several files at a time (npm run test:unit)
//   node scripts/test.mjs --containers  the container tests (npm run test:containers)
// Other arguments filter files by substring: `npm test -- store edge`. ROOTBOX_TEST_JOBS sets
// how many fast-tier files run at once (default: the number of CPUs, at least 4: most of these
// files wait on timers and sockets more than they compute).
// The tests run on the Node rootbox runs on: when scripts/setup shipped one in node/ (the host's
// being older than the LTS), this script runs itself again on it, with node/bin first in PATH.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const shipped = fileURLToPath(new URL('../node/bin/node', import.meta.url));
if (existsSync(shipped) && realpathSync(process.execPath) !== realpathSync(shipped)) {
  const env = { ...process.env, PATH: `${dirname(shipped)}:${process.env.PATH ?? ''}` };
  const r = spawnSync(shipped, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit', env });
  process.exit(r.status ?? 1);
}

/** The fast tier: test files that need no container, no root and no runc. Listed slowest first
 *  (roughly), so the long ones overlap. */
const UNIT = [
  'test/presence/doze-tracker.test.ts',
  'test/billing/exhausted.test.ts',
  'test/proxy/wake.test.ts',
  'test/proxy/thaw.test.ts',
  'test/http/hosting-contract.test.ts',
  'test/ssh/auth.test.ts',
  'test/ssh/starvation.test.ts',
  'test/http/verify-contract.test.ts',
  'test/http/apidocs.test.ts',
  'test/mcp/tools.test.ts',
  'test/proxy/forward.test.ts',
  'test/channel/rawlane.test.ts',
  'test/channel/retrybudget.test.ts',
  'test/foundation/edge-guard.test.ts',
  'test/proxy/http1-diff.test.ts',
  'test/payments/paywall.test.ts',
  'test/foundation/edge-wire.test.ts',
  'test/verify/paid.test.ts',
  'test/proxy/http1.test.ts',
  'test/verify/api.test.ts',
  'test/hosting/ports.test.ts',
  'test/verify/e2e.test.ts',
  'test/foundation/edge.test.ts',
  'test/metrics/metrics.test.ts',
  'test/edge/proxy.test.ts',
  'test/edge/lane.test.ts',
  'test/edge/lane-parity.test.ts',
  'test/h1/request-diff.test.ts',
  'test/edge/alpn.test.ts',
  'test/billing/meter.test.ts',
  'test/registry/ledger.test.ts',
  'test/registry/accounts.test.ts',
  'test/registry/ops.test.ts',
  'test/registry/quorum.test.ts',
  'test/registry/promotion.test.ts',
  'test/registry/ledger-kill.test.ts',
  'test/registry/placements.test.ts',
  'test/registry/shared.test.ts',
  'test/registry/moved.test.ts',
  'test/registry/strangers.test.ts',
  'test/registry/sharedmaps.test.ts',
  'test/foundation/edge-lifecycle.test.ts',
  'test/hosting/phone.test.ts',
  'test/proxy/exchange-errors.test.ts',
  'test/foundation/store.test.ts',
  'test/foundation/config.test.ts',
  'test/foundation/error-answers.test.ts',
  'test/foundation/catalogue.test.ts',
  'test/foundation/price.test.ts',
  'test/foundation/hostclaims.test.ts',
  'test/foundation/quietbuild.test.ts',
  'test/payments/codec.test.ts',
  'test/payments/facilitator-auth.test.ts',
  'test/payments/selfsettle.test.ts',
  'test/proxy/sites.test.ts',
  'test/hosting/pending.test.ts',
  'test/foundation/log.test.ts',
  'test/domains/names.test.ts',
  'test/net/fetch.test.ts',
  'test/net/bomb.test.ts',
  'test/payments/crash.test.ts',
  'test/payments/recover.test.ts',
  'test/payments/digest.test.ts',
  'test/payments/signer.test.ts',
  'test/install/noderuntime.test.ts',
  'test/install/ports.test.ts',
  'test/hosting/ratelimit-doc.test.ts',
  'test/hosting/capacity.test.ts',
  'test/registry/fence.test.ts',
  'test/registry/resume.test.ts',
  'test/registry/leases.test.ts',
];

/** The API contract suites: run twice, on a single box and then against a daemon in registry
 *  mode (ROOTBOX_TEST_REGISTRY=1: a PostgreSQL per test process; shown `<file> [registry]`). */
const BOTH_MODES = ['test/http/hosting-contract.test.ts', 'test/http/verify-contract.test.ts', 'test/hosting/api.test.ts'];

const root = new URL('..', import.meta.url).pathname;
const limitMs = Number(process.env.ROOTBOX_TEST_FILE_TIMEOUT_MS ?? 15 * 60_000);
const args = process.argv.slice(2);
const tier = args.includes('--unit') ? 'unit' : args.includes('--containers') ? 'containers' : 'all';
const filters = args.filter((a) => !a.startsWith('--'));
const jobs = tier === 'unit' ? Math.max(1, Number(process.env.ROOTBOX_TEST_JOBS ?? Math.max(4, availableParallelism()))) : 1;

function find(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) return n === 'fixtures' || n === 'helpers' ? [] : find(p);
    return n.endsWith('.test.ts') ? [p] : [];
  });
}

const isUnit = (file) => UNIT.includes(relative(root, file));
const all = find(join(root, 'test')).sort();
for (const u of UNIT) if (!all.some((f) => relative(root, f) === u)) process.stdout.write(`!! ${u} is listed in the fast tier but does not exist\n`);
const files = all
  .filter((f) => tier === 'all' || (tier === 'unit') === isUnit(f))
  .filter((f) => filters.length === 0 || filters.some((s) => relative(root, f).includes(s)));
if (tier === 'unit') files.sort((a, b) => UNIT.indexOf(relative(root, a)) - UNIT.indexOf(relative(root, b)));
/** Each run: a file and its mode. A contract suite's registry run follows its single-box run
 *  (queued first when that one ends), never beside it: a file's fixed ports would clash. */
const runs = files.map((file) => ({ file, registry: false }));
const twice = (file) => BOTH_MODES.includes(relative(root, file));

let passed = 0;
let failed = 0;
let skipped = 0;
const failures = [];

/** Runs one file; its output is written at once when files run one at a time, else when it ends. */
async function runFile({ file, registry }) {
  const name = relative(root, file) + (registry ? ' [registry]' : '');
  const started = Date.now();
  const live = jobs === 1;
  let shown = '';
  const show = (s) => (live ? process.stdout.write(s) : (shown += s));
  show(`\n── ${name}\n`);
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: root,
    env: {
      ROOTBOX_IMAGE_DIR: join(root, 'var', 'images'),
      ...process.env,
      ...(isUnit(file) ? { ROOTBOX_TEST_RUNTIME: 'process' } : {}),
      ...(registry ? { ROOTBOX_TEST_REGISTRY: '1' } : {}),
      NO_COLOR: '1',
      FORCE_COLOR: '0',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
    show(String(d));
  });
  child.stderr.on('data', (d) => (live ? process.stderr.write(d) : (shown += d)));
  const timer = setTimeout(() => {
    show(`\n!! ${name} exceeded ${limitMs} ms; killing it\n`);
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
  }, limitMs);
  const code = await new Promise((r) => child.on('close', (c, sig) => r(c ?? (sig ? 128 : 1))));
  clearTimeout(timer);
  const num = (label) => Number((new RegExp(`${label}:\\s+(\\d+)`).exec(out) ?? [])[1] ?? NaN);
  const total = num('Total');
  const ok = num('Passed');
  const skip = num('Skipped');
  if (Number.isNaN(total)) {
    failed += 1;
    failures.push(`${name} (exit ${code}, no summary)`);
  } else {
    passed += ok;
    skipped += skip || 0;
    const bad = total - ok - (skip || 0);
    failed += bad;
    if (bad > 0 || code !== 0) {
      if (bad === 0) failed += 1;
      failures.push(`${name} (exit ${code})`);
    }
  }
  show(`   ${name}: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  if (!live) process.stdout.write(shown);
}

const started = Date.now();
const queue = [...runs];
await Promise.all(
  Array.from({ length: Math.min(jobs, queue.length) }, async () => {
    while (queue.length) {
      const next = queue.shift();
      await runFile(next);
      if (!next.registry && twice(next.file)) queue.unshift({ file: next.file, registry: true });
    }
  }),
);

if (files.length === 0) {
  process.stdout.write('no test files matched\n');
  process.exitCode = 1;
}
if (failures.length) process.stdout.write(`\nfailed files:\n  ${failures.join('\n  ')}\n`);
process.stdout.write(
  `\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''} (${tier === 'all' ? 'all tiers' : tier === 'unit' ? 'fast tier' : 'container tests'}, ${((Date.now() - started) / 1000).toFixed(0)} s)\n`,
);
if (failed > 0) process.exitCode = 1;
