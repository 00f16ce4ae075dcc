#!/usr/bin/env node
// Rewrites the configuration reference in README.md (between the config markers) from the zod
// schema, via the bundled CLI's `config docs`, and the metrics reference (metrics markers) via
// `metrics docs`, and the API reference in docs/hosting-api.md and docs/verify-api.md from the
// OpenAPI documents a daemon serves (test/helpers/apidocs.ts). Run after changing any config
// field or route.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const root = new URL('..', import.meta.url).pathname;
execFileSync(process.execPath, ['build.mjs'], { cwd: root, stdio: 'inherit' });
const ref = execFileSync(process.execPath, ['dist/rootbox.js', 'config', 'docs'], { cwd: root, encoding: 'utf8' }).trimEnd();
const readme = readFileSync(root + 'README.md', 'utf8');
const next = readme.replace(/(<!-- config:begin -->\n)[\s\S]*?(<!-- config:end -->)/, `$1${ref}\n$2`);
if (next === readme && !readme.includes(ref)) throw new Error('README.md has no <!-- config:begin --> / <!-- config:end --> markers');
const metrics = execFileSync(process.execPath, ['dist/rootbox.js', 'metrics', 'docs'], { cwd: root, encoding: 'utf8' }).trimEnd();
const withMetrics = next.replace(/(<!-- metrics:begin -->\n)[\s\S]*?(<!-- metrics:end -->)/, `$1${metrics}\n$2`);
if (withMetrics === next && !next.includes(metrics)) throw new Error('README.md has no <!-- metrics:begin --> / <!-- metrics:end --> markers');
writeFileSync(root + 'README.md', withMetrics);
console.log('README.md configuration and metrics references updated');
execFileSync(process.execPath, ['--import', 'tsx', 'test/helpers/apidocs.ts', '--write'], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, ROOTBOX_TEST_RUNTIME: 'process' },
});
