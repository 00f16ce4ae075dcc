// Types of scripts/bundle.mjs for the TypeScript that imports it (bench/proxy).
import type { BuildOptions } from 'esbuild';

export declare const bundleOptions: BuildOptions;
