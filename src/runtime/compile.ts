// The runtime's small C programs (the idmapped-mount helper, the exec wrapper) are compiled once
// with the host's cc into a directory, named by the hash of their source, so a changed source
// builds a new binary and an unchanged one is never rebuilt. The build lands under a temporary
// name and is renamed into place, so a half-written binary is never used.

import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from './proc.js';

/** Host path of `<dir>/<prefix>-<hash>`, compiling `source` first when it is missing; throws on failure. */
export async function compileOnce(dir: string, prefix: string, source: string, flags: string[] = []): Promise<string> {
  const bin = join(dir, `${prefix}-${createHash('sha256').update(source).digest('hex').slice(0, 12)}`);
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const src = `${bin}.${process.pid}.c`;
  const tmp = `${bin}.${process.pid}`;
  try {
    writeFileSync(src, source);
    await run('cc', [...flags, '-O2', '-Wall', '-o', tmp, src], { timeoutMs: 60_000 });
    chmodSync(tmp, 0o755);
    renameSync(tmp, bin);
    return bin;
  } finally {
    rmSync(src, { force: true });
    rmSync(tmp, { force: true });
  }
}
