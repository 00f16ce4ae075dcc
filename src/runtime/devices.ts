// A server's /dev: its device files (null, zero, full, random, urandom, tty) come from a small
// tmpfs of the daemon's own at <dataDir>/devices, not from the host's devtmpfs, so neither `df`
// nor /proc/self/mountinfo inside a server names a host device or the host's memory size.
//
// Why not runc's own /dev: runc 1.1 cannot mknod in a user namespace, so it bind-mounts each
// default device from the host's /dev/<name> (the source of that bind is the device's own path,
// it cannot be pointed elsewhere), after the spec's mounts — `df` inside listed `devtmpfs` at
// /dev/tty with the host's memory as its size, and again at /proc/keys and /proc/timer_list,
// which runc masks with that /dev/null. runc leaves /dev alone altogether (no device files, no
// ptmx, no links) when the spec has a bind mount at /dev, so spec.ts (devMounts) does it:
//   1. binds <dir>/skel at /dev — the links runc would make (fd, stdin, stdout, stderr, ptmx);
//   2. mounts the server's /dev tmpfs over it with runc's `tmpcopyup`, which copies the links in
//      (they show owned by nobody, the host's root being unmapped in the server);
//   3. devpts, /dev/shm, /dev/mqueue as before;
//   4. binds each device file from <dir>/<name> (device files on a mount made inside a user
//      namespace cannot be opened, so the files are the host root's, on a mount of the host's).
// Every bind source is a host path of ours: nothing is read through the server's own rootfs.
// The tmpfs has no size (statfs reports 0 blocks, so `df` leaves it out and `df -a` shows it as
// `tmpfs 0 0 0`) and room for 32 inodes. The device cgroup is unchanged: runc's default allow
// list (these six, ptys), everything else denied (spec.ts).
//
// mountDevices() mounts it afresh when a runtime starts (detaching one left by a killed daemon),
// unmountDevices() detaches it at close. A running or parked server holds its own binds, which
// keep that tmpfs alive in its mount namespace, so neither ever touches a server.

import { mkdirSync, realpathSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { mountTable } from './disk.js';
import { run, tryRun } from './proc.js';

/** The device files every server gets: name, major, minor (runc's default devices). */
export const DEVICES = [
  ['null', 1, 3],
  ['zero', 1, 5],
  ['full', 1, 7],
  ['random', 1, 8],
  ['urandom', 1, 9],
  ['tty', 5, 0],
] as const;

/** The links in a server's /dev (runc's setupDevSymlinks and setupPtmx). */
export const DEV_LINKS: Readonly<Record<string, string>> = {
  fd: '/proc/self/fd',
  stdin: '/proc/self/fd/0',
  stdout: '/proc/self/fd/1',
  stderr: '/proc/self/fd/2',
  ptmx: 'pts/ptmx',
};

export const devicesDir = (dataDir: string) => join(dataDir, 'devices');
export const devSkel = (dir: string) => join(dir, 'skel');

const mounted = (dir: string) => mountTable().has(realpathSync(dir));

/** Mounts the devices tmpfs of a data dir, with its device files and links; returns its path. */
export async function mountDevices(dataDir: string): Promise<string> {
  const dir = devicesDir(dataDir);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  for (let i = 0; i < 8 && mounted(dir); i++) await run('umount', ['-l', dir]);
  await run('mount', ['-t', 'tmpfs', '-o', 'size=0,nr_inodes=32,mode=755,nosuid,noexec', 'tmpfs', dir]);
  await Promise.all(DEVICES.map(([name, major, minor]) => run('mknod', ['-m', '666', join(dir, name), 'c', String(major), String(minor)])));
  mkdirSync(devSkel(dir), { mode: 0o755 });
  for (const [name, target] of Object.entries(DEV_LINKS)) symlinkSync(target, join(devSkel(dir), name));
  return dir;
}

/** Detaches the devices tmpfs of a data dir (servers keep theirs: see the header). */
export async function unmountDevices(dataDir: string): Promise<void> {
  const dir = devicesDir(dataDir);
  try {
    if (!mounted(dir)) return;
  } catch {
    return; // no such directory
  }
  await tryRun('umount', ['-l', dir]);
}
