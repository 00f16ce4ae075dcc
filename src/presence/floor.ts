// The host memory floor of dozing servers: how much memory the host has available (MemAvailable
// from /proc/meminfo, the kernel's estimate of what can be used without swapping, plus the free
// pages on its per-CPU lists, which MemAvailable leaves out) and which
// dozing servers to stop when it is below the floor — the least recently used first, servers with
// an open connection (a quiet WebSocket or exposed-port connection, which a stop would cut) only
// after all others, as many as the missing memory needs by what each holds frozen.

import { readFileSync } from 'node:fs';
import { endianness } from 'node:os';

const procText = (path: string): string => readFileSync(path, 'utf8');

/** Memory the host can use now, in bytes: MemAvailable (/proc/meminfo) plus the free pages the
 *  kernel keeps on its per-CPU lists (/proc/zoneinfo, `count` of each pageset), which MemAvailable
 *  leaves out. Since Linux 6.7 those lists are tuned up to about 1 GiB per CPU: the pages of an
 *  exited process (a stopped server) land there and drain into MemAvailable only over seconds,
 *  and an allocation (a growing process) takes from them first; MemAvailable alone lags both
 *  ways. Infinity when MemAvailable cannot be read (then nothing is stopped for it); the lists
 *  count 0 when zoneinfo cannot be read. `read` and `pageSize` are given by tests. */
export function hostMemAvailable(read: (path: string) => string = procText, pageSize = kernelPageSize()): number {
  let kb: string | undefined;
  try {
    kb = /^MemAvailable:\s+(\d+) kB$/m.exec(read('/proc/meminfo'))?.[1];
  } catch {
    return Infinity;
  }
  if (kb === undefined) return Infinity;
  let pages = 0;
  try {
    for (const m of read('/proc/zoneinfo').matchAll(/^\s+count:\s+(\d+)$/gm)) pages += Number(m[1]);
  } catch {
    /* no zoneinfo: MemAvailable alone */
  }
  return Number(kb) * 1024 + pages * pageSize;
}

let pageSizeRead: number | undefined;

/** The kernel's page size (AT_PAGESZ of /proc/self/auxv, read once; 4096 when unreadable). */
function kernelPageSize(): number {
  if (pageSizeRead !== undefined) return pageSizeRead;
  pageSizeRead = 4096;
  try {
    const b = readFileSync('/proc/self/auxv');
    const word = (i: number) => (endianness() === 'LE' ? b.readBigUInt64LE(i) : b.readBigUInt64BE(i));
    for (let i = 0; i + 16 <= b.length; i += 16) {
      const type = word(i);
      if (type === 0n) break;
      if (type === 6n) pageSizeRead = Number(word(i + 8)); // AT_PAGESZ
    }
  } catch {
    /* not Linux or no procfs: the usual size */
  }
  return pageSizeRead;
}

export interface Dozer {
  id: string;
  /** Last activity (epoch ms). */
  last: number;
  /** Memory a stop gives back: its anonymous memory at freeze (the cgroup's page cache of shared
   *  image files stays cached), or its cgroup usage where that is not known. */
  memoryBytes: number;
  /** An open connection would be cut by a stop. */
  connected: boolean;
}

/** The dozing servers to stop so that `missing` bytes come free: LRU first, connected ones last;
 *  at least one while anything is missing, as long as any dozes. */
export function victims(dozers: Dozer[], missing: number): string[] {
  if (!(missing > 0)) return [];
  const order = [...dozers].sort((a, b) => Number(a.connected) - Number(b.connected) || a.last - b.last);
  const out: string[] = [];
  let freed = 0;
  for (const d of order) {
    if (freed >= missing) break;
    out.push(d.id);
    freed += Math.max(d.memoryBytes, 1);
  }
  return out;
}
