// An esbuild plugin for bundles of TypeScript test files (scripts/test.mjs, test/helpers/bundle.ts):
// each module keeps its own source's import.meta.url, .filename and .dirname, as under tsx, so
// paths a module finds relative to itself still point into the checkout.

import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';

export const ownImportMeta = {
  name: 'own-import-meta-url',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (a) => ({
      contents: readFileSync(a.path, 'utf8')
        .replaceAll('import.meta.url', JSON.stringify(pathToFileURL(a.path).href))
        .replaceAll('import.meta.filename', JSON.stringify(a.path))
        .replaceAll('import.meta.dirname', JSON.stringify(dirname(a.path))),
      loader: 'ts',
    }));
  },
};
