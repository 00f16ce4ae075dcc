#!/usr/bin/env node
// Builds the package into dist/ (or `--outdir <dir>`): the ESM bundles of `rootbox` and
// `rootbox/agents` (esbuild, Node 20, node: built-ins and packages left as imports) and the
// .d.ts types (tsc, declarations only). Uses the esbuild and typescript of the rootbox checkout
// this directory sits in (or of its own node_modules, after npm install).

import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const require = createRequire(import.meta.url);
const { build } = await import('esbuild');

const at = process.argv.indexOf('--outdir');
const out = at > 0 ? resolve(process.argv[at + 1]) : `${here}dist`;
rmSync(out, { recursive: true, force: true });
await build({
  entryPoints: [`${here}src/index.ts`, `${here}src/agents.ts`],
  outdir: out,
  bundle: true,
  splitting: true, // rootbox/agents shares the client's code with rootbox
  format: 'esm',
  platform: 'node',
  target: 'node20',
  packages: 'external',
  sourcemap: true,
  logLevel: 'error',
});
const tsc = require.resolve('typescript/bin/tsc');
const r = spawnSync(process.execPath, [tsc, '-p', `${here}tsconfig.json`, '--outDir', out], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
console.log(`built ${out} (index.js, agents.js and their .d.ts)`);
