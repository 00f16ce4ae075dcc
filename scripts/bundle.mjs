// How the daemon is bundled by esbuild: build.mjs makes dist/rootbox.js with these options, and
// bench/proxy bundles its container daemon with the same ones, so it measures what ships. Native
// addons (lmdb, node-pty, ssh2 with its sshcrypto binding, cpu-features) stay external: they are
// loaded from node_modules at run time so their compiled .node files and native crypto stay intact;
// everything else is inlined.

import { readFileSync } from 'node:fs';

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

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
