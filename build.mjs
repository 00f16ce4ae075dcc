// Bundles the daemon and CLI into dist/ with esbuild.
// Native addons (lmdb, node-pty, ssh2 with its sshcrypto binding, cpu-features) stay external:
// they are loaded from node_modules at run time so their compiled .node files and native crypto
// stay intact; everything else is inlined.
import { build } from 'esbuild';

const external = ['lmdb', 'node-pty', 'ssh2', 'cpu-features', 'msgpackr-extract'];

await build({
  entryPoints: { rootbox: 'src/cli.ts' },
  outdir: 'dist',
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'esm',
  sourcemap: true,
  external,
  banner: {
    // Some bundled CommonJS dependencies call require(); give them one in the ESM bundle.
    js: "import { createRequire as __rbxCreateRequire } from 'node:module'; const require = __rbxCreateRequire(import.meta.url);",
  },
  logLevel: 'warning',
});
