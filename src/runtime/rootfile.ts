// Files inside a server's root filesystem, opened from the host without ever following a symlink:
// each path component is opened with O_NOFOLLOW in the directory opened before it (through
// /proc/self/fd/<dir>/<name>, which the kernel resolves like openat(2) from that directory), so a
// user's symlink anywhere on the path — /var, /var/log or the file — is refused, never followed
// out of the root. The last open is also O_NONBLOCK (a fifo never hangs the daemon) and anything
// but a regular file is refused. Used for the logs the daemon reads (hosting's logs endpoint) and
// the line it appends when the kernel kills a process of a server (oom.ts), and the file reads of
// a sleeping server over HTTP (hosting's files.ts).

import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

const { O_RDONLY, O_WRONLY, O_APPEND, O_CREAT, O_TRUNC, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;

const parts = (path: string) => path.split('/').filter((p) => p && p !== '.');

/** Opens `path` (a container path) under the host directory `root`; undefined when any
 *  component is missing, a symlink or not a directory, or the file is not a regular file. */
async function openIn(root: string, path: string, flags: number, mode?: number): Promise<FileHandle | undefined> {
  const names = parts(path);
  if (!names.length || names.includes('..')) return undefined;
  let dir: FileHandle;
  try {
    dir = await open(root, O_RDONLY | O_DIRECTORY);
  } catch {
    return undefined;
  }
  try {
    for (let i = 0; i < names.length - 1; i++) {
      const next = await open(`/proc/self/fd/${dir.fd}/${names[i]}`, O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch(() => undefined);
      await dir.close();
      if (!next) return undefined;
      dir = next;
    }
    const fh = await open(`/proc/self/fd/${dir.fd}/${names[names.length - 1]}`, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, mode).catch(() => undefined);
    if (!fh) return undefined;
    if (!(await fh.stat()).isFile()) {
      await fh.close();
      return undefined;
    }
    return fh;
  } finally {
    await dir.close().catch(() => {});
  }
}

/** The last `maxBytes` of a file inside the root (its whole content when smaller), or undefined
 *  when it is not there as a regular file reached without symlinks. */
export async function readTail(root: string, path: string, maxBytes: number): Promise<Buffer | undefined> {
  const fh = await openIn(root, path, O_RDONLY);
  if (!fh) return undefined;
  try {
    const size = (await fh.stat()).size;
    const len = Math.min(size, maxBytes);
    const buf = Buffer.alloc(len);
    const { bytesRead } = await fh.read(buf, 0, len, size - len);
    return buf.subarray(0, bytesRead);
  } catch {
    return undefined;
  } finally {
    await fh.close();
  }
}

/** A regular file inside the root opened for reading without following any symlink (see the
 *  header), or undefined; the caller closes it. */
export function openFileIn(root: string, path: string): Promise<FileHandle | undefined> {
  return openIn(root, path, O_RDONLY);
}

/** Appends text to a file inside the root (emptied first with `truncate`), creating it (mode
 *  0644, owned by `owner`: the server's root) when missing. False when the path cannot be reached without a symlink. */
export async function appendIn(root: string, path: string, text: string, owner: { uid: number; gid: number }, truncate = false): Promise<boolean> {
  const fh = await openIn(root, path, O_WRONLY | O_APPEND | O_CREAT | (truncate ? O_TRUNC : 0), 0o644);
  if (!fh) return false;
  try {
    const st = await fh.stat();
    if (st.uid === 0 && owner.uid !== 0) await fh.chown(owner.uid, owner.gid); // created just now by the daemon
    await fh.write(text);
    return true;
  } catch {
    return false;
  } finally {
    await fh.close();
  }
}
