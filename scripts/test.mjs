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
// The fast tier's files run bundled (bundleTests below: esbuild, our TypeScript and the daemon's
// own dependencies inlined as in dist/, test-only packages left to node_modules), which starts each
// file's process in a fraction of the CPU tsx's loader takes for the same modules, and share one
// Node compile cache (NODE_COMPILE_CACHE, as the daemons and CLIs they start do); ROOTBOX_TEST_TSX=1
// runs them through tsx as the container tests are.
// ROOTBOX_TEST_CPU=1 shows each file's CPU time beside its wall time: its process and everything
// it starts (PostgreSQL, daemons, CLIs) run in a cpuacct cgroup of its own (cgroup v1, as root).

import { spawn, spawnSync } from 'node:child_process';
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleOptions, testExternal } from './bundle.mjs';
import { ownImportMeta } from './own-import-meta.mjs';

const shipped = fileURLToPath(new URL('../node/bin/node', import.meta.url));
if (existsSync(shipped) && realpathSync(process.execPath) !== realpathSync(shipped)) {
  const env = { ...process.env, PATH: `${dirname(shipped)}:${process.env.PATH ?? ''}` };
  const r = spawnSync(shipped, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit', env });
  process.exit(r.status ?? 1);
}

/** The fast tier: test files that need no container, no root and no runc. Listed slowest first
 *  (roughly: the first ones by their wall time in a ROOTBOX_TEST_CPU=1 run; a contract suite counts
 *  with its registry run, which follows it), so the long ones overlap instead of ending the run. */
const UNIT = [
  'test/registry/listenfirst.test.ts',
  'test/admin/whereabouts.test.ts',
  'test/registry/deadhost.test.ts',
  'test/registry/heard.test.ts',
  'test/registry/accounts.test.ts',
  'test/registry/shared.test.ts',
  'test/http/hosting-contract.test.ts',
  'test/h1/request-diff.test.ts',
  'test/proxy/wake.test.ts',
  'test/registry/quorum.test.ts',
  'test/registry/limits.test.ts',
  'test/registry/fwdlimits.test.ts',
  'test/registry/ledger.test.ts',
  'test/registry/checkpointbytes.test.ts',
  'test/foundation/edge-guard.test.ts',
  'test/http/verify-contract.test.ts',
  'test/net/bomb.test.ts',
  'test/registry/token.test.ts',
  'test/registry/ops.test.ts',
  'test/registry/fence.test.ts',
  'test/registry/fencethaw.test.ts',
  'test/registry/fenceasked.test.ts',
  'test/moves/recoverchoice.test.ts',
  'test/checkpoints/s3-faults.test.ts',
  'test/presence/doze-tracker.test.ts',
  'test/checkpoints/engine.test.ts',
  'test/checkpoints/orphans.test.ts',
  'test/checkpoints/races.test.ts',
  'test/admin/rebuildrefusals.test.ts',
  'test/billing/exhausted.test.ts',
  'test/ssh/auth.test.ts',
  'test/ssh/starvation.test.ts',
  'test/http/apidocs.test.ts',
  'test/mcp/tools.test.ts',
  'test/proxy/forward.test.ts',
  'test/proxy/fairpool.test.ts',
  'test/channel/rawlane.test.ts',
  'test/channel/retrybudget.test.ts',
  'test/channel/admit.test.ts',
  'test/channel/peerrefuse.test.ts',
  'test/channel/startretry.test.ts',
  'test/channel/wire.test.ts',
  'test/channel/injectedclock.test.ts',
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
  'test/edge/alpn.test.ts',
  'test/billing/meter.test.ts',
  'test/registry/ledger-kill.test.ts',
  'test/registry/placements.test.ts',
  'test/registry/moved.test.ts',
  'test/registry/ownerepoch.test.ts',
  'test/registry/strangers.test.ts',
  'test/registry/tombstones.test.ts',
  'test/registry/namesrun.test.ts',
  'test/registry/settingsrow.test.ts',
  'test/registry/newkey.test.ts',
  'test/registry/startquota.test.ts',
  'test/registry/sharedmaps.test.ts',
  'test/registry/feed.test.ts',
  'test/registry/certversions.test.ts',
  'test/registry/edgeca.test.ts',
  'test/registry/rejoin.test.ts',
  'test/registry/joinwait.test.ts',
  'test/foundation/edge-lifecycle.test.ts',
  'test/hosting/phone.test.ts',
  'test/hosting/limits.test.ts',
  'test/proxy/exchange-errors.test.ts',
  'test/foundation/store.test.ts',
  'test/foundation/config.test.ts',
  'test/foundation/error-answers.test.ts',
  'test/foundation/catalogue.test.ts',
  'test/foundation/price.test.ts',
  'test/foundation/hostclaims.test.ts',
  'test/foundation/quietbuild.test.ts',
  'test/foundation/lazydeps.test.ts',
  'test/runtime/personalise.test.ts',
  'test/hosting/stalecopies.test.ts',
  'test/registry/pooltx.test.ts',
  'test/hosting/sharedrate.test.ts',
  'test/foundation/firstcall.test.ts',
  'test/foundation/logwhere.test.ts',
  'test/payments/codec.test.ts',
  'test/payments/facilitator-auth.test.ts',
  'test/proxy/sites.test.ts',
  'test/hosting/pending.test.ts',
  'test/foundation/log.test.ts',
  'test/domains/names.test.ts',
  'test/net/fetch.test.ts',
  'test/llm/openai.test.ts',
  'test/payments/recover.test.ts',
  'test/payments/journal.test.ts',
  'test/payments/digest.test.ts',
  'test/payments/signer.test.ts',
  'test/payments/ecmul.test.ts',
  'test/install/noderuntime.test.ts',
  'test/install/ports.test.ts',
  'test/hosting/ratelimit-doc.test.ts',
  'test/hosting/capacity.test.ts',
  'test/registry/fenceheld.test.ts',
  'test/registry/resume.test.ts',
  'test/registry/leases.test.ts',
  'test/checkpoints/backoff.test.ts',
  'test/moves/refusals.test.ts',
  'test/moves/precheck.test.ts',
  'test/moves/lostanswer.test.ts',
  'test/moves/unsettled.test.ts',
  'test/moves/moveback.test.ts',
  'test/moves/adoptleftover.test.ts',
  'test/moves/recoverlease.test.ts',
  'test/moves/drain-choice.test.ts',
  'test/moves/recoverrules.test.ts',
  'test/hosting/movehold.test.ts',
  'test/hosting/listwait.test.ts',
  'test/moves/drainfinal.test.ts',
  'test/sdk/coverage.test.ts',
  'test/sdk/retry.test.ts',
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

/** Bundles test files with esbuild into a temp dir (one build, chunks shared between files):
 *  every file under src/ and test/ inlined, and the packages dist/ inlines (testExternal in
 *  scripts/bundle.mjs: natives and devDependencies are imported from node_modules, linked beside
 *  the bundles). Each module keeps its own import.meta.url, filename and dirname (its source
 *  file's, as under tsx: fixtures, bin/ and native helpers are found from them), and
 *  process.argv[1] is set back to the test file before it runs. Answers each file's bundle. */
async function bundleTests(list) {
  const { build } = await import('esbuild');
  const out = mkdtempSync(join(tmpdir(), 'rbx-testbundle-'));
  symlinkSync(join(root, 'node_modules'), join(out, 'node_modules'));
  try {
    await build({
      entryPoints: list,
      outdir: out,
      outbase: root,
      outExtension: { '.js': '.mjs' },
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node24',
      external: testExternal,
      banner: bundleOptions.banner,
      sourcemap: 'linked',
      sourcesContent: false, // line mappings only: a map with every source in it costs each process ~0.1 s to read
      plugins: [ownImportMeta],
      logLevel: 'error',
    });
  } catch (e) {
    rmSync(out, { recursive: true, force: true });
    throw e;
  }
  return { dir: out, of: (file) => join(out, relative(root, file)).replace(/\.ts$/, '.mjs') };
}

const bundled = tier === 'unit' && process.env.ROOTBOX_TEST_TSX !== '1' ? await bundleTests(files) : undefined;
if (bundled) {
  const gone = () => rmSync(bundled.dir, { recursive: true, force: true });
  process.on('exit', gone);
  for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130));
}
/** How a file's process starts: its bundle, argv[1] set back to the file; or the file through tsx. */
const entry = (file) =>
  bundled
    ? ['--enable-source-maps', `--import=data:text/javascript,process.argv[1]=${encodeURIComponent(JSON.stringify(file))}`, bundled.of(file)]
    : ['--import', 'tsx', file];

/** One initdb for the run (test/helpers/postgres.ts copies it for each cluster a file starts):
 *  a dir holding `data` and the rootbox role's password in `pw`, removed at exit. */
async function pgTemplate() {
  const bin = '/usr/lib/postgresql/15/bin';
  const ids = readFileSync('/etc/passwd', 'utf8').match(/^postgres:[^:]*:(\d+):(\d+):/m);
  if (!ids || !existsSync(`${bin}/initdb`)) return undefined;
  // in tmpfs when there is one, as the clusters copied from it (test/helpers/postgres.ts)
  const dir = mkdtempSync(join(process.env.ROOTBOX_TEST_PG_BASE ?? (existsSync('/dev/shm') ? '/dev/shm' : tmpdir()), 'rbx-pgtemplate-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const [uid, gid] = [Number(ids[1]), Number(ids[2])];
  chownSync(dir, uid, gid);
  writeFileSync(join(dir, 'pw'), `pw-${Math.random().toString(36).slice(2, 12)}\n`, { mode: 0o600 });
  chownSync(join(dir, 'pw'), uid, gid);
  const args = ['-u', 'postgres', '--', `${bin}/initdb`, '-D', join(dir, 'data'), '-U', 'rootbox', `--pwfile=${join(dir, 'pw')}`];
  args.push('--auth=scram-sha-256', '-E', 'UTF8', '--no-sync');
  const code = await new Promise((r) => spawn('runuser', args, { stdio: 'ignore' }).on('close', r));
  return code === 0 ? dir : undefined;
}
/** Whether a run starts PostgreSQL: a registry-mode run, or a file that names it. */
const wantsPg = ({ file, registry }) => registry || /startPostgres|testRegistry|twohosts/.test(readFileSync(file, 'utf8'));
const pgReady = runs.some(wantsPg) || files.some(twice) ? pgTemplate() : Promise.resolve(undefined);

/** ROOTBOX_TEST_CPU=1: a cpuacct cgroup per run, or undefined when there is none to make. */
const cpuRoot = '/sys/fs/cgroup/cpuacct';
let cgroups = 0;
function cpuGroup() {
  if (process.env.ROOTBOX_TEST_CPU !== '1' || !existsSync(join(cpuRoot, 'cgroup.procs'))) return undefined;
  const dir = join(cpuRoot, `rbxtest-${process.pid}-${(cgroups += 1)}`);
  try {
    mkdirSync(dir);
  } catch {
    return undefined;
  }
  const ticks = (what) => Number(new RegExp(`${what} (\\d+)`).exec(readFileSync(join(dir, 'cpuacct.stat'), 'utf8'))?.[1] ?? NaN) / 100;
  return {
    /** The command that joins the cgroup, then execs the file's process. */
    wrap: (cmd, args) => ['/bin/sh', ['-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', dir, cmd, ...args]],
    /** `cpu U+S s` of everything that ran in it; removes it (once nothing is left in it). */
    done() {
      const [user, sys] = [ticks('user'), ticks('system')];
      const left = readFileSync(join(dir, 'cgroup.procs'), 'utf8').trim();
      if (!left) rmdirSync(dir);
      return `, cpu ${(user + sys).toFixed(1)} s (user ${user.toFixed(1)}, sys ${sys.toFixed(1)})${left ? `, processes left: ${left.split('\n').join(' ')}` : ''}`;
    },
  };
}

/** Runs one file; its output is written at once when files run one at a time, else when it ends. */
async function runFile({ file, registry }) {
  const name = relative(root, file) + (registry ? ' [registry]' : '');
  const started = Date.now();
  const live = jobs === 1;
  let shown = '';
  const show = (s) => (live ? process.stdout.write(s) : (shown += s));
  show(`\n── ${name}\n`);
  const pgTemplateDir = wantsPg({ file, registry }) ? await pgReady : undefined;
  const cg = cpuGroup();
  const [cmd, argv] = cg ? cg.wrap(process.execPath, entry(file)) : [process.execPath, entry(file)];
  const child = spawn(cmd, argv, {
    cwd: root,
    env: {
      ROOTBOX_IMAGE_DIR: join(root, 'var', 'images'),
      ...process.env,
      ...(pgTemplateDir ? { ROOTBOX_TEST_PG_TEMPLATE: pgTemplateDir } : {}),
      ...(isUnit(file) ? { ROOTBOX_TEST_RUNTIME: 'process' } : {}),
      ...(registry ? { ROOTBOX_TEST_REGISTRY: '1' } : {}),
      ...(bundled ? { NODE_COMPILE_CACHE: join(bundled.dir, '.compile-cache') } : {}),
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
  show(`   ${name}: ${((Date.now() - started) / 1000).toFixed(1)} s${cg ? cg.done() : ''}\n`);
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
