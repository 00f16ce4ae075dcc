#!/usr/bin/env node
// Compiles the runtime's C programs: every src/runtime/native/<name>.c into
// dist/bin/<name>-<first 12 hex of the sha256 of the file>, with the flags of its `// cflags:` line.
// src/runtime/native.ts looks binaries up by the same name, so a changed source is never served by
// a binary of an older one; an unchanged source is not compiled again. Each build lands under a
// temporary name and is renamed into place, so a half-written binary is never used. Binaries of
// older sources stay (a running daemon may use them); `rm -rf dist` clears them.
// `npm run build` runs this (build.mjs); alone: `node scripts/native.mjs [checkout]`.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Builds what is missing under `root`; returns the paths it compiled. Throws naming the fix. */
export function buildNative(root = fileURLToPath(new URL('..', import.meta.url))) {
  const srcDir = join(root, 'src', 'runtime', 'native');
  const outDir = join(root, 'dist', 'bin');
  const built = [];
  for (const file of readdirSync(srcDir)
    .filter((n) => n.endsWith('.c'))
    .sort()) {
    const source = join(srcDir, file);
    const text = readFileSync(source);
    const hash = createHash('sha256').update(text).digest('hex').slice(0, 12);
    const bin = join(outDir, `${file.slice(0, -2)}-${hash}`);
    if (existsSync(bin)) continue;
    const flags = (/^\/\/ cflags:(.*)$/m.exec(text.toString('utf8'))?.[1] ?? '').trim().split(/\s+/).filter(Boolean);
    mkdirSync(outDir, { recursive: true });
    const tmp = `${bin}.${process.pid}.tmp`;
    try {
      execFileSync('cc', [...flags, '-o', tmp, source], { stdio: ['ignore', 'inherit', 'pipe'] });
      chmodSync(tmp, 0o755);
      renameSync(tmp, bin);
    } catch (e) {
      const why = e.code === 'ENOENT' ? 'cc not found' : e.stderr?.toString().trim() || e.message;
      throw new Error(`cannot compile ${relative(root, source)}: ${why}\n(apt-get install -y gcc libc6-dev, or run scripts/setup as root)`);
    } finally {
      rmSync(tmp, { force: true });
    }
    built.push(bin);
  }
  return built;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    for (const bin of buildNative(process.argv[2] ? resolve(process.argv[2]) : undefined)) console.log(`built ${bin}`);
  } catch (e) {
    console.error(`scripts/native.mjs: ${e.message}`);
    process.exit(1);
  }
}
