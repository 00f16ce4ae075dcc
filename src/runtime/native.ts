// Where the runtime's small C programs are: src/runtime/native/<name>.c (rbx-idmount, the
// idmapped-mount helper; rbx-exec, the exec wrapper) is compiled by `npm run build` (build.mjs with
// scripts/native.mjs; scripts/setup runs it) into dist/bin/<name>-<hash>, the hash being that of
// the source file (its `// cflags:` line included). The runtime looks up the binary of the source
// it finds in the checkout, so an edited source is never served by a binary of an older one: until
// the build runs again the binary is missing, and the error names the command that builds it.
// The bundle (dist/rootbox.js, run by bin/rootbox) and src/ under tsx (the tests) both live in the
// checkout, so both find the same binaries.

import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppError } from '../errors.js';

export type NativeProgram = 'rbx-idmount' | 'rbx-exec' | 'rbx-lock' | 'rbx-freeze';

/** Sources, relative to the checkout. scripts/native.mjs builds every .c file found here. */
const SOURCES = join('src', 'runtime', 'native');
/** Build output, relative to the checkout (not committed: dist/ is ignored). */
const OUTPUT = join('dist', 'bin');

export interface NativeBinary {
  name: NativeProgram;
  /** The checkout the source was found in. */
  root: string;
  source: string;
  /** dist/bin/<name>-<hash of source>: what the build makes of the current source. */
  path: string;
  built: boolean;
}

/** The checkout: the nearest directory above `from` (this module's own) that holds src/runtime/native. */
export function checkoutRoot(from = dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, SOURCES))) return dir;
    if (dirname(dir) === dir) throw AppError.of('native_missing', `no ${SOURCES} above ${from}: rootbox runs from its checkout (bin/rootbox)`);
  }
}

/** The binary built from the current source of `name` (scripts/native.mjs names it the same way). */
export function nativeBinary(name: NativeProgram, root = checkoutRoot()): NativeBinary {
  const source = join(root, SOURCES, `${name}.c`);
  const hash = createHash('sha256').update(readFileSync(source)).digest('hex').slice(0, 12);
  const path = join(root, OUTPUT, `${name}-${hash}`);
  return { name, root, source, path, built: existsSync(path) };
}

/** The sentence for a binary that is not built: what is missing and the command that builds it. */
export function notBuilt(b: NativeBinary): string {
  return `${relative(b.root, b.path)} (built from ${relative(b.root, b.source)}) is missing; run \`npm run build\` in ${b.root} (scripts/setup runs it; needs gcc and libc6-dev)`;
}
