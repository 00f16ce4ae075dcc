// The mount helper: a tiny C program (native/rbx-idmount.c, built by `npm run build` into
// dist/bin, see native.ts) that mounts a server's overlay with the base image as an idmapped,
// read-only lower layer (runc 1.1 and util-linux 2.38 cannot make idmapped mounts; the kernel can),
// and a server's disk image through a loop device under the device name `disk` (mount -o loop
// names the mount /dev/loopN, which every server shows in `df` for its /run/rootbox and which
// tells how many disks the host has), and grows that disk online.
// The overlay's options are what /proc/self/mountinfo shows inside the server, so they name no
// host path: the helper runs in the server's disk directory and gets upper and work as relative
// names (overlayfs keeps the strings it was given). The overlay is mounted nosuid,nodev,noatime: nothing
// a server writes can become a setuid binary or a device node on the host's side of its root.

import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
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
 * target, nosuid,nodev,noatime (a read writes nothing to the disk). `upper` and `work` are names relative to `dir`, where the helper runs.
 */
export async function mountIdmappedOverlay(
  helper: string,
  o: { uidBase: number; lower: string; dir: string; upper: string; work: string; target: string },
): Promise<void> {
  await run(helper, ['overlay', String(o.uidBase), '65536', o.lower, o.upper, o.work, o.target], { timeoutMs: 30_000, cwd: o.dir });
}

/** The device name a server's disk is mounted under (what `df` and mountinfo show as its source). */
export const DISK_SOURCE = 'disk';

/**
 * Mounts the ext4 image `img` at `target` (absolute) nosuid,nodev,noatime through a loop device
 * attached with autoclear (freed on umount, or at once if the helper dies before mounting), under
 * the device name DISK_SOURCE. The helper makes and removes a scratch directory `.loop-*` in
 * `dir` (one left by a helper killed part-way is removed here first).
 */
export async function mountDiskImage(helper: string, o: { img: string; dir: string; target: string }): Promise<void> {
  for (const e of readdirSync(o.dir)) if (e.startsWith('.loop-')) rmSync(join(o.dir, e), { recursive: true, force: true });
  await run(helper, ['loop', o.img, o.target, DISK_SOURCE], { timeoutMs: 60_000, cwd: o.dir });
}

/** Grows the ext4 mounted at `target` online to the size of its (already resized) loop device.
 *  Fails without CAP_SYS_RESOURCE, as resize2fs does. */
export async function growMountedDisk(helper: string, target: string, loop: string): Promise<void> {
  await run(helper, ['grow', target, loop], { timeoutMs: 120_000 });
}
