// Types of own-import-meta.mjs for the TypeScript that imports it.
import type { Plugin } from 'esbuild';
export declare const ownImportMeta: Plugin;
