#!/usr/bin/env node
// Runs every test/**/*.test.ts file in its own Node process (uvu suites, TypeScript through
// tsx), one after another, each under a time limit, and ends with one line `N passed, N failed`.
// Arguments filter files by substring: `npm test -- store edge`.

import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const limitMs = Number(process.env.ROOTBOX_TEST_FILE_TIMEOUT_MS ?? 15 * 60_000);
const filters = process.argv.slice(2);

function find(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) return n === 'fixtures' || n === 'helpers' ? [] : find(p);
    return n.endsWith('.test.ts') ? [p] : [];
  });
}

const files = find(join(root, 'test'))
  .sort()
  .filter((f) => filters.length === 0 || filters.some((s) => relative(root, f).includes(s)));

let passed = 0;
let failed = 0;
let skipped = 0;
const failures = [];

for (const file of files) {
  const name = relative(root, file);
  const started = Date.now();
  process.stdout.write(`\n── ${name}\n`);
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: root,
    env: { ROOTBOX_IMAGE_DIR: join(root, 'var', 'images'), ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
    process.stdout.write(d);
  });
  child.stderr.on('data', (d) => process.stderr.write(d));
  const timer = setTimeout(() => {
    process.stdout.write(`\n!! ${name} exceeded ${limitMs} ms; killing it\n`);
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
  process.stdout.write(`   ${name}: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}

if (files.length === 0) {
  process.stdout.write('no test files matched\n');
  process.exitCode = 1;
}
if (failures.length) process.stdout.write(`\nfailed files:\n  ${failures.join('\n  ')}\n`);
process.stdout.write(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}\n`);
if (failed > 0) process.exitCode = 1;
