// Path resolution inside a server's root filesystem, seen from the host. The walk goes component
// by component with lstat/readlink and resolves every symlink against the *container's* root
// (like openat2's RESOLVE_IN_ROOT): `..` never climbs above it and absolute targets restart from
// it, never from the host's `/`. The final open uses O_NOFOLLOW|O_NONBLOCK (a fifo or device can
// never hang the daemon), refuses anything but regular files and directories, and then checks
// through /proc/self/fd that the kernel really opened a file inside the root: a container that
// swaps a directory for a symlink between our walk and our open gets a refusal, not the host file.

import { constants, type Stats } from 'node:fs';
import { lstat, open, readlink, realpath, type FileHandle } from 'node:fs/promises';
import { AppError } from '../errors.js';

const MAX_LINKS = 40; // the kernel's own limit (ELOOP)
const MAX_SEGMENTS = 256;
const MAX_PATH = 4096;

export interface Found {
  /** Host path of the resolved entry, free of symlinks at the time of the walk. */
  hostPath: string;
  /** Container path of the resolved entry (for messages and redirects). */
  containerPath: string;
  stat: Stats;
}

/**
 * Splits a request target into decoded path segments with `.`/`..` applied lexically. Encoded
 * slashes, NUL bytes, malformed escapes and `..` above the top are refused with 400.
 */
export function urlSegments(rawUrl: string): { segments: string[]; trailingSlash: boolean } {
  let path = rawUrl;
  const cut = path.search(/[?#]/);
  if (cut >= 0) path = path.slice(0, cut);
  if (!path.startsWith('/') || path.length > MAX_PATH) {
    throw AppError.of('bad_path', 'the request path must start with / and be shorter than 4096 bytes');
  }
  const out: string[] = [];
  const raw = path.split('/');
  if (raw.length > MAX_SEGMENTS) throw AppError.of('bad_path', 'the request path has too many segments');
  for (const seg of raw) {
    let s: string;
    try {
      s = decodeURIComponent(seg);
    } catch {
      throw AppError.of('bad_path', 'the request path has a malformed %-escape');
    }
    if (s.includes('/') || s.includes('\0')) {
      throw AppError.of('bad_path', 'the request path may not contain encoded slashes or NUL bytes');
    }
    if (s === '' || s === '.') continue;
    if (s === '..') {
      if (out.length === 0) throw AppError.of('bad_path', 'the request path climbs above the site root');
      out.pop();
      continue;
    }
    out.push(s);
  }
  return { segments: out, trailingSlash: path.endsWith('/') };
}

/**
 * Walks `segments` (a container path split on `/`) from the container root `root` (a host
 * directory). Returns undefined when the path does not exist, loops, or runs through a non-directory.
 */
export async function walk(root: string, segments: readonly string[]): Promise<Found | undefined> {
  let stack: string[] = [];
  let queue: string[] = [...segments];
  let links = 0;
  let last: Stats | undefined;
  while (queue.length > 0) {
    const c = queue.shift()!;
    if (c === '' || c === '.') continue;
    if (c === '..') {
      stack.pop();
      last = undefined;
      continue;
    }
    const p = `${root}/${[...stack, c].join('/')}`;
    let st: Stats;
    try {
      st = await lstat(p);
    } catch {
      return undefined; // ENOENT, ENOTDIR (a file used as a directory), EACCES, ENAMETOOLONG
    }
    if (st.isSymbolicLink()) {
      if (++links > MAX_LINKS) return undefined;
      let target: string;
      try {
        target = await readlink(p);
      } catch {
        return undefined;
      }
      if (target === '') return undefined;
      if (target.startsWith('/')) stack = [];
      queue = [...target.split('/'), ...queue];
      last = undefined;
      continue;
    }
    if (queue.some((q) => q !== '' && q !== '.') && !st.isDirectory()) return undefined;
    stack.push(c);
    last = st;
  }
  const hostPath = stack.length ? `${root}/${stack.join('/')}` : root;
  if (!last) {
    try {
      last = await lstat(hostPath);
    } catch {
      return undefined;
    }
  }
  return { hostPath, containerPath: `/${stack.join('/')}`, stat: last };
}

const realRoots = new Map<string, string>();

async function realRoot(root: string): Promise<string> {
  let r = realRoots.get(root);
  if (!r) {
    r = await realpath(root);
    if (realRoots.size > 10_000) realRoots.clear();
    realRoots.set(root, r);
  }
  return r;
}

/**
 * Opens a resolved regular file for reading without following a final symlink and without
 * blocking on fifos or devices; verifies the opened file lies under `root`. Undefined when the
 * entry is not a regular file or lies outside.
 */
export async function openInside(root: string, found: Found): Promise<{ fh: FileHandle; stat: Stats } | undefined> {
  if (!found.stat.isFile()) return undefined;
  let fh: FileHandle;
  try {
    fh = await open(found.hostPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch {
    return undefined;
  }
  try {
    const stat = await fh.stat();
    if (!stat.isFile()) throw new Error('not a regular file');
    const real = await readlink(`/proc/self/fd/${fh.fd}`);
    const top = await realRoot(root);
    if (!real.startsWith(top.endsWith('/') ? top : `${top}/`)) throw new Error('outside the root');
    return { fh, stat };
  } catch {
    await fh.close().catch(() => {});
    return undefined;
  }
}
