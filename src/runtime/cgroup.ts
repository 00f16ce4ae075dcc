// Reading a server's cgroup from the host: memory in use (without reclaimable page cache) and OOM
// kills, on cgroup v1 (memory controller at /sys/fs/cgroup/memory) or v2 (unified). Also the
// check that nothing is left behind after delete, and the SIGKILL of a whole (frozen) cgroup.

import { existsSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { forget } from './freezer.js';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));
const V1_CONTROLLERS = [
  'memory',
  'pids',
  'cpu',
  'cpuacct',
  'cpuset',
  'devices',
  'freezer',
  'blkio',
  'net_cls',
  'net_prio',
  'perf_event',
  'hugetlb',
  'rdma',
  'misc',
  'systemd',
];

const read = (p: string): string | undefined => {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return undefined;
  }
};

const field = (text: string | undefined, name: string): number => {
  const m = text ? new RegExp(`^${name} (\\d+)$`, 'm').exec(text) : null;
  return m ? Number(m[1]) : 0;
};

/** Directories that exist for a cgroup path, across hierarchies. */
export function cgroupDirs(path: string): string[] {
  if (V2) return [join(ROOT, path)].filter(existsSync);
  return V1_CONTROLLERS.map((c) => join(ROOT, c, path)).filter(existsSync);
}

/** SIGKILL to every process of the cgroup, frozen ones too: v2's cgroup.kill (Linux 5.14+), else
 *  each process the freezer's cgroup.procs lists (a frozen cgroup forks nothing meanwhile; the
 *  signal is pending until a thaw, which it ends). False where the cgroup could not be read. */
export function killCgroup(path: string): boolean {
  if (V2)
    try {
      writeFileSync(join(ROOT, path, 'cgroup.kill'), '1', { flag: 'r+' });
      return true;
    } catch {
      // an older kernel: one process at a time
    }
  const procs = read(join(ROOT, V2 ? '' : 'freezer', path, 'cgroup.procs'));
  if (procs === undefined) return false;
  for (const pid of procs.split('\n').filter(Boolean))
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // gone already
    }
  return true;
}

/** Removes empty cgroup dirs runc left (it normally removes them itself). */
export function removeCgroup(path: string): void {
  forget(path); // a freeze's open control file
  for (const d of cgroupDirs(path)) {
    try {
      rmdirSync(d);
    } catch {
      /* busy or gone */
    }
  }
}

/** Memory in use without reclaimable page cache, its anonymous part (what the processes' exit
 *  gives back to the host: page cache of shared image files stays cached), and OOM kills. */
export function memoryStats(path: string): { memoryBytes: number; anonBytes: number; oomKills: number } {
  if (V2) {
    const dir = join(ROOT, path);
    const current = Number(read(join(dir, 'memory.current')) ?? 0);
    const stat = read(join(dir, 'memory.stat'));
    const inactive = field(stat, 'inactive_file');
    return { memoryBytes: Math.max(0, current - inactive), anonBytes: field(stat, 'anon'), oomKills: field(read(join(dir, 'memory.events')), 'oom_kill') };
  }
  const dir = join(ROOT, 'memory', path);
  const usage = Number(read(join(dir, 'memory.usage_in_bytes')) ?? 0);
  const stat = read(join(dir, 'memory.stat'));
  const inactive = field(stat, 'total_inactive_file');
  return {
    memoryBytes: Math.max(0, usage - inactive),
    anonBytes: field(stat, 'total_rss'),
    oomKills: field(read(join(dir, 'memory.oom_control')), 'oom_kill'),
  };
}
