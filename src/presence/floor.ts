// The host memory floor of dozing servers: how much memory the host has available (MemAvailable
// from /proc/meminfo, the kernel's estimate of what can be used without swapping) and which
// dozing servers to stop when it is below the floor — the least recently used first, servers with
// an open connection (a quiet WebSocket or exposed-port connection, which a stop would cut) only
// after all others, as many as the missing memory needs by what each holds frozen.

import { readFileSync } from 'node:fs';

/** Host MemAvailable in bytes (Infinity when it cannot be read: then nothing is stopped for it). */
export function hostMemAvailable(): number {
  try {
    const kb = /^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1];
    return kb === undefined ? Infinity : Number(kb) * 1024;
  } catch {
    return Infinity;
  }
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
