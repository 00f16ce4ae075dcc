// How the daemon is bundled by esbuild: build.mjs makes dist/rootbox.js with these options, and
// bench/proxy bundles its container daemon with the same ones, so it measures what ships. Native
// addons (lmdb, node-pty, ssh2 with its sshcrypto binding, cpu-features) stay external: they are
// loaded from node_modules at run time so their compiled .node files and native crypto stay intact;
// everything else is inlined.

import { readFileSync } from 'node:fs';

const { version, devDependencies } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

/** @type {import('esbuild').BuildOptions} */
export const bundleOptions = {
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  external: ['lmdb', 'node-pty', 'ssh2', 'cpu-features', 'msgpackr-extract'],
  banner: {
    // Some bundled CommonJS dependencies call require(); give them one in the ESM bundle.
    js: "import { createRequire as __rbxCreateRequire } from 'node:module'; const require = __rbxCreateRequire(import.meta.url);",
  },
  // the version hosts report to the cluster registry (src/registry/host.ts)
  define: { 'process.env.ROOTBOX_BUILD_VERSION': JSON.stringify(version) },
  logLevel: 'warning',
};

/** What bundles of test files and of the children tests start (scripts/test.mjs,
 *  test/helpers/bundle.ts) leave to node_modules: the natives as above and the test-only packages
 *  (devDependencies: some find files beside their own module, esbuild its binary). The daemon's own
 *  dependencies are inlined as in dist/: a process that loads src/main.ts then reads one file
 *  instead of hundreds of ESM modules from node_modules (about half the CPU of its start). */
export const testExternal = [...bundleOptions.external, ...Object.keys(devDependencies)];
