// Builds dist/: the runtime's C helpers into dist/bin (scripts/native.mjs: each named by the hash of
// its source, compiled only when that binary is missing), then the daemon and CLI bundle with esbuild
// (scripts/bundle.mjs: natives external, everything else inlined).
import { build } from 'esbuild';
import { bundleOptions } from './scripts/bundle.mjs';
import { buildNative } from './scripts/native.mjs';

try {
  for (const bin of buildNative()) console.log(`built ${bin}`);
} catch (e) {
  console.error(`build: ${e.message}`);
  process.exit(1);
}

await build({ ...bundleOptions, entryPoints: { rootbox: 'src/cli.ts' }, outdir: 'dist', sourcemap: true });
