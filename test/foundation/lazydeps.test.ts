// The daemon's start and the CLI's load none of the heavy packages only some boxes or requests
// need: acme-client (an ACME order), the AWS SDK (an s3:// checkpoint store), openai (a verification
// call) and the MCP SDK (an MCP request) are imported where they are used, by import(). Checked on
// the import graph esbuild finds from src/main.ts and src/cli.ts: no static import chain reaches
// them. (Their load was about half the CPU of a daemon's start: 0.46 s -> 0.25 s.)

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { build, type Metafile } from 'esbuild';

const root = new URL('../../', import.meta.url).pathname;
const LAZY = ['acme-client', '@aws-sdk/client-s3', 'openai', '@modelcontextprotocol/sdk'];

/** The packages an entry imports statically, directly or through any chain of static imports. */
async function staticPackages(entry: string): Promise<Set<string>> {
  const r = await build({
    entryPoints: [`${root}${entry}`],
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    packages: 'external',
    outdir: '/nonexistent', // write: false
    write: false,
    metafile: true,
    logLevel: 'error',
  });
  const outputs: Metafile['outputs'] = r.metafile.outputs;
  const start = Object.keys(outputs).find((o) => outputs[o].entryPoint)!;
  const seen = new Set<string>();
  const packages = new Set<string>();
  const walk = (out: string) => {
    if (seen.has(out)) return;
    seen.add(out);
    for (const i of outputs[out].imports) {
      if (i.kind !== 'import-statement') continue; // import() loads when it runs
      if (outputs[i.path]) walk(i.path);
      else if (i.external) packages.add(i.path);
    }
  };
  walk(start);
  return packages;
}

for (const entry of ['src/main.ts', 'src/cli.ts']) {
  test(`${entry} imports none of ${LAZY.join(', ')} statically`, async () => {
    const found = await staticPackages(entry);
    assert.ok(
      [...found].some((p) => p === 'lmdb'),
      `the walk sees the static packages: ${[...found].join(' ')}`,
    );
    const loaded = [...found].filter((p) => LAZY.some((l) => p === l || p.startsWith(`${l}/`)));
    assert.equal(loaded, [], `loaded with ${entry}: ${loaded.join(', ')}`);
  });
}

test.run();
