// The idmapped-mount helper: a tiny C program (native/rbx-idmount.c, built by `npm run build` into
// dist/bin, see native.ts) that mounts a server's overlay with the base image as an idmapped,
// read-only lower layer (runc 1.1 and util-linux 2.38 cannot make idmapped mounts; the kernel can).
// The overlay's options are what /proc/self/mountinfo shows inside the server, so they name no
// host path: the helper runs in the server's disk directory and gets upper and work as relative
// names (overlayfs keeps the strings it was given). The overlay is mounted nosuid,nodev: nothing
// a server writes can become a setuid binary or a device node on the host's side of its root.

import { AppError } from '../errors.js';
import { nativeBinary, notBuilt } from './native.js';
import { run } from './proc.js';

/** Path of the helper built from its current source; throws `helper_missing` when it is not built. */
export function helperPath(root?: string): string {
  const b = nativeBinary('rbx-idmount', root);
  if (!b.built) throw AppError.of('helper_missing', `the idmapped-mount helper is not built: ${notBuilt(b)}`);
  return b.path;
}

/**
 * Mounts overlay(lower = idmapped read-only view of `lower` shifted to uidBase, upper, work) at
 * target, nosuid,nodev. `upper` and `work` are names relative to `dir`, where the helper runs.
 */
export async function mountIdmappedOverlay(
  helper: string,
  o: { uidBase: number; lower: string; dir: string; upper: string; work: string; target: string },
): Promise<void> {
  await run(helper, ['overlay', String(o.uidBase), '65536', o.lower, o.upper, o.work, o.target], { timeoutMs: 30_000, cwd: o.dir });
}
