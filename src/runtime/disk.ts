// A server's disk and root filesystem on the host:
//   servers/<id>/disk.img  sparse ext4 file, size = the tier's disk ceiling
//   servers/<id>/disk      its loop mount, made by the mount helper (helper.ts: mountDiskImage)
//                          under the device name `disk`, so no mount a server sees (its
//                          /run/rootbox is a bind of this disk) names the host's /dev/loopN;
//                          the loop device is attached with autoclear, freed on umount
//     upper/ work/         overlay upper and work dirs (upper owned by the server's root uid)
//     init/                the server's copy of the init files (tini, supervisor, exec wrapper),
//                          bind-mounted read-only at /run/rootbox. A copy on the server's own
//                          filesystem, not a bind of <dataDir>/runtime/init, because a bind shows
//                          its source path in the server's /proc/self/mountinfo; this one reads
//                          `/init` on the server's loop device.
//   servers/<id>/rootfs    overlay: idmapped base image (read-only) + upper; stays mounted while
//                          the server sleeps so the proxy can serve /root/www without waking it.
// Both host mounts are nosuid,nodev,noatime: what a server writes never becomes a setuid program or a
// device node on the host's side, and neither mount names a host path in its options.
// servers/<id> is 0710 root:<the server's root gid> (closeServerDir): the daemon (root) and the
// server's own mapped root (runc's setup inside its user namespace, which must reach rootfs and
// disk/init) traverse it; no other host user (nor another server's uids) reaches its files.

import {
  chmodSync,
  chownSync,
  closeSync,
  copyFileSync,
  existsSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  statfsSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { chown, mkdir } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { growMountedDisk, mountDiskImage, mountIdmappedOverlay } from './helper.js';
import { run, tryRun } from './proc.js';

export interface DiskPaths {
  dir: string;
  img: string;
  disk: string;
  upper: string;
  work: string;
  init: string;
  rootfs: string;
}

export const diskPaths = (serverDir: string): DiskPaths => ({
  dir: serverDir,
  img: join(serverDir, 'disk.img'),
  disk: join(serverDir, 'disk'),
  upper: join(serverDir, 'disk', 'upper'),
  work: join(serverDir, 'disk', 'work'),
  init: join(serverDir, 'disk', 'init'),
  rootfs: join(serverDir, 'rootfs'),
});

const unoctal = (s: string) => s.replace(/\\(\d{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));

/** Mount points currently in the host's mount table (unescaped), each with its per-mount options. */
export function mountTable(): Map<string, string[]> {
  const text = readFileSync('/proc/self/mountinfo', 'utf8');
  const out = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    if (f.length > 5) out.set(unoctal(f[4]), f[5].split(','));
  }
  return out;
}

/** Mount points currently in the host's mount table (unescaped). */
export function mountedPaths(): Set<string> {
  return new Set(mountTable().keys());
}

/** Host mounts of a server's root carry these flags, and both noatime (remounted with them when an
 *  older daemon mounted them without): the edge's reads of a sleeping server's files write no atime
 *  to its disk, whose image would then read as changed since its checkpoint (a move, a sleep). */
const SAFE = ['nosuid', 'nodev'];

async function ensureSafeFlags(table: Map<string, string[]>, target: string, also: string[] = []): Promise<void> {
  const opts = table.get(target);
  if (opts && ![...SAFE, ...also].every((f) => opts.includes(f))) await run('mount', ['-o', ['remount', 'bind', ...SAFE, ...also].join(','), target]);
}

/** Makes servers/<id> 0710 owned by root and the server's root group (its mapped gid 0), when it
 *  is not so already (a server made by an older daemon had it 0711: open to every host user). */
export function closeServerDir(dir: string, uidBase: number): void {
  const st = statSync(dir);
  if (st.uid !== 0 || st.gid !== uidBase) chownSync(dir, 0, uidBase);
  if ((st.mode & 0o7777) !== 0o710) chmodSync(dir, 0o710);
}

/** Creates the sparse image and its ext4 filesystem (no reserved blocks: the ceiling is the user's). */
export async function makeDisk(p: DiskPaths, bytes: number): Promise<void> {
  mkdirSync(p.dir, { recursive: true, mode: 0o700 }); // mountRootfs opens it to the server's root (closeServerDir)
  const fd = openSync(p.img, 'wx', 0o600);
  try {
    ftruncateSync(fd, bytes);
  } finally {
    closeSync(fd);
  }
  await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1', p.img], { timeoutMs: 120_000 });
}

/** Mounts disk and overlay when not mounted yet (idempotent; used by create and after a reboot). */
export async function mountRootfs(p: DiskPaths, helper: string, lower: string, uidBase: number, mounted = mountTable()): Promise<void> {
  closeServerDir(p.dir, uidBase);
  if (!mounted.has(p.disk)) {
    if (existsSync(growMarker(p))) await offlineResize(p);
    await mkdir(p.disk, { recursive: true, mode: 0o711 });
    await mountDiskImage(helper, { img: p.img, dir: p.dir, target: p.disk }); // nosuid,nodev,noatime
  } else await ensureSafeFlags(mounted, p.disk, ['noatime']);
  if (!existsSync(p.upper)) {
    await mkdir(p.upper, { mode: 0o755 });
    await chown(p.upper, uidBase, uidBase);
  }
  await mkdir(p.work, { recursive: true, mode: 0o700 });
  if (!mounted.has(p.rootfs)) {
    await mkdir(p.rootfs, { recursive: true, mode: 0o755 });
    await mountIdmappedOverlay(helper, { uidBase, lower, dir: p.disk, upper: relative(p.disk, p.upper), work: relative(p.disk, p.work), target: p.rootfs });
  } else await ensureSafeFlags(mounted, p.rootfs, ['noatime']);
}

/**
 * Brings the server's copy of the init files (every file of `from` without a dot in its name:
 * tini, supervisor, rbx-exec-<hash>) up to date: copies what differs in size or mtime, removes
 * what is gone. Files appear inside a running server at once (the bind is of the directory).
 * A copy that fails (the user filled the disk) keeps the previous version when there is one.
 */
export function syncInitFiles(from: string, p: DiskPaths): void {
  mkdirSync(p.init, { recursive: true, mode: 0o755 });
  const want = readdirSync(from, { withFileTypes: true })
    .filter((e) => e.isFile() && !e.name.includes('.'))
    .map((e) => e.name);
  for (const name of want) {
    const src = statSync(join(from, name));
    const dst = join(p.init, name);
    let have: ReturnType<typeof statSync> | undefined;
    try {
      have = statSync(dst);
    } catch {
      have = undefined;
    }
    // utimes keeps about a millisecond of the source's mtime: closer than 2 ms is the same version
    if (have && have.size === src.size && Math.abs(have.mtimeMs - src.mtimeMs) < 2) continue;
    const tmp = `${dst}.tmp`;
    try {
      copyFileSync(join(from, name), tmp);
      chmodSync(tmp, 0o755);
      utimesSync(tmp, src.atime, src.mtime);
      renameSync(tmp, dst);
    } catch (e) {
      rmSync(tmp, { force: true });
      if (!have) throw e;
    }
  }
  for (const name of readdirSync(p.init)) if (!want.includes(name)) rmSync(join(p.init, name), { force: true, recursive: true });
}

/** Unmounts overlay and disk (the loop device goes with it) and any other mount in the server's
 *  dir (its pinned namespaces), and removes the server's files. A
 *  loop device still backed by the image (a mount cut off by a crash between attaching and
 *  mounting) is detached too. */
export async function destroyDisk(p: DiskPaths): Promise<void> {
  // overlay, disk and whatever else is pinned in the server's dir (its namespaces), deepest first
  const under = [...mountedPaths()].filter((m) => m.startsWith(p.dir + '/')).sort((a, b) => b.length - a.length);
  for (const m of under) {
    if (!(await tryRun('umount', [m]))) await run('umount', ['-l', m]);
  }
  if (existsSync(p.img)) {
    for (const dev of await loopsOf(p.img)) await tryRun('losetup', ['-d', dev]);
  }
  rmSync(p.dir, { recursive: true, force: true });
}

/** Every loop device backed by the image. */
async function loopsOf(img: string): Promise<string[]> {
  const r = await tryRun('losetup', ['-n', '-O', 'NAME', '-j', img]);
  return (
    r?.stdout
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean) ?? []
  );
}

/** The loop device backing a server's image, if attached. */
export async function loopOf(img: string): Promise<string | undefined> {
  const r = await tryRun('losetup', ['-n', '-O', 'NAME', '-j', img]);
  return r?.stdout.trim().split('\n')[0] || undefined;
}

const growMarker = (p: DiskPaths) => join(p.dir, 'disk.grow');

async function offlineResize(p: DiskPaths): Promise<void> {
  await run('e2fsck', ['-f', '-p', p.img], { okCodes: [0, 1], timeoutMs: 120_000 });
  await run('resize2fs', [p.img], { timeoutMs: 120_000 });
  rmSync(growMarker(p), { force: true });
}

/**
 * Grows the image and the loop device, then the ext4 online (through the mount helper:
 * resize2fs does not know a disk mounted under our name for mounted). Online growth needs
 * CAP_SYS_RESOURCE; without it (some sandboxes) the growth is deferred: a marker file makes the
 * next sleep (or the next mount after a reboot) resize the filesystem offline. Never shrinks.
 */
export async function growDisk(p: DiskPaths, helper: string, bytes: number): Promise<'online' | 'offline' | 'deferred'> {
  const fd = openSync(p.img, 'r+');
  try {
    if (fstatSync(fd).size < bytes) ftruncateSync(fd, bytes);
  } finally {
    closeSync(fd);
  }
  const loop = await loopOf(p.img);
  if (!loop) {
    await offlineResize(p);
    return 'offline';
  }
  await run('losetup', ['-c', loop]);
  try {
    await growMountedDisk(helper, p.disk, loop);
    return 'online';
  } catch {
    writeFileSync(growMarker(p), `${bytes}\n`);
    return 'deferred';
  }
}

/** Applies a deferred growth while the server is stopped: unmount, resize offline, mount again.
 *  Leaves everything mounted (and the marker in place) when something still uses the rootfs. */
export async function applyDeferredGrow(p: DiskPaths, helper: string, lower: string, uidBase: number): Promise<boolean> {
  if (!existsSync(growMarker(p))) return false;
  if (!(await tryRun('umount', [p.rootfs]))) return false;
  if (!(await tryRun('umount', [p.disk]))) {
    await mountRootfs(p, helper, lower, uidBase);
    return false;
  }
  try {
    await offlineResize(p);
  } finally {
    await mountRootfs(p, helper, lower, uidBase);
  }
  return true;
}

/** Bytes in use on the server's disk (what the user wrote, plus ext4 metadata). */
export function diskUsed(p: DiskPaths): number {
  try {
    const s = statfsSync(p.disk);
    return (s.blocks - s.bfree) * s.bsize;
  } catch {
    return 0;
  }
}
