// Types of scripts/bundle.mjs for the TypeScript that imports it (bench/proxy, test/helpers/bundle.ts).
import type { BuildOptions } from 'esbuild';

export declare const bundleOptions: BuildOptions;
export declare const testExternal: string[];
