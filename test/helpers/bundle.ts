// A TypeScript entry a test starts as a child process many times (a daemon it kills and starts
// again), bundled once per test process by esbuild: our TypeScript and the daemon's dependencies
// inlined as in dist/, natives and test-only packages imported from node_modules (linked beside
// the bundle; testExternal in scripts/bundle.mjs), each module keeping its source's
// import.meta.url as under tsx. A child then starts on plain Node (`node --enable-source-maps
// <bundle>`) in a fraction of the CPU tsx's loader takes for the same modules. The bundles are
// removed at exit.

import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { build } from 'esbuild';
import { ownImportMeta } from '../../scripts/own-import-meta.mjs';

const root = new URL('../../', import.meta.url).pathname;
const made = new Map<string, Promise<string>>();
let dir: string | undefined;

/** The bundled file of `entry` (an absolute path), made on the first call. */
export function bundled(entry: string): Promise<string> {
  let p = made.get(entry);
  if (!p) {
    p = (async () => {
      if (!dir) {
        const d = mkdtempSync(join(tmpdir(), 'rbx-childbundle-'));
        dir = d;
        symlinkSync(join(root, 'node_modules'), join(d, 'node_modules'));
        process.on('exit', () => rmSync(d, { recursive: true, force: true }));
      }
      // imported at run time from the checkout, not bundled into this file (it reads package.json beside it)
      const { bundleOptions, testExternal } = (await import(join(root, 'scripts', 'bundle.mjs'))) as typeof import('../../scripts/bundle.mjs');
      const outfile = join(dir, `${made.size}-${basename(entry).replace(/\.ts$/, '.mjs')}`);
      await build({
        entryPoints: [entry],
        outfile,
        bundle: true,
        format: 'esm',
        platform: 'node',
        target: 'node24',
        external: testExternal,
        banner: bundleOptions.banner,
        // the tests often SIGKILL these children, and a killed process writes no compile cache
        // (NODE_COMPILE_CACHE, set by scripts/test.mjs): written once the entry module has run
        footer: { js: "await import('node:module').then((m) => m.flushCompileCache?.());" },
        sourcemap: 'linked',
        sourcesContent: false,
        logLevel: 'error',
        plugins: [ownImportMeta],
      });
      return outfile;
    })();
    made.set(entry, p);
  }
  return p;
}

/** The arguments that start `entry` on plain Node: its bundle, with source maps for stack traces. */
export async function nodeArgs(entry: string): Promise<string[]> {
  return ['--enable-source-maps', await bundled(entry)];
}
