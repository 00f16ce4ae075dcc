// Builds dist/: the runtime's C helpers into dist/bin (scripts/native.mjs: each named by the hash of
// its source, compiled only when that binary is missing), then the daemon and CLI bundle with esbuild.
// Native addons (lmdb, node-pty, ssh2 with its sshcrypto binding, cpu-features) stay external:
// they are loaded from node_modules at run time so their compiled .node files and native crypto
// stay intact; everything else is inlined.
import { build } from 'esbuild';
import { buildNative } from './scripts/native.mjs';

try {
  for (const bin of buildNative()) console.log(`built ${bin}`);
} catch (e) {
  console.error(`build: ${e.message}`);
  process.exit(1);
}

const external = ['lmdb', 'node-pty', 'ssh2', 'cpu-features', 'msgpackr-extract'];

await build({
  entryPoints: { rootbox: 'src/cli.ts' },
  outdir: 'dist',
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  sourcemap: true,
  external,
  banner: {
    // Some bundled CommonJS dependencies call require(); give them one in the ESM bundle.
    js: "import { createRequire as __rbxCreateRequire } from 'node:module'; const require = __rbxCreateRequire(import.meta.url);",
  },
  logLevel: 'warning',
});
