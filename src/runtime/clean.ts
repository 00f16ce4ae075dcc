// `rootbox dev clean`: what a development run (`bin/rootbox serve` on ./var) leaves on the host
// once its daemon is stopped — the containers still running under <dataDir>/runc, the mounts under
// the data dir (servers' roots and disks, lxcfs, the device nodes), the loop devices of the
// servers' disk images, the lxcfs process, the bridge and the nft tables — removed. Only while no
// daemon holds these names (the host-name locks are taken for the duration, so a running daemon
// refuses it with host_names_taken). The data stays (a later serve brings the servers back);
// `purge` removes the data dir too.

import { existsSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { RuntimeSettings } from './factory.js';
import { hostClaims, lockHost } from './locks.js';
import { Network } from './network.js';
import { alive, run, tryRun } from './proc.js';
import { Runc } from './runc.js';

/** Mount points at or under `dir`, deepest first (from this process's mountinfo). */
export function mountsUnder(dir: string, mountinfo = readFileSync('/proc/self/mountinfo', 'utf8')): string[] {
  const unescape = (s: string) => s.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  const points = mountinfo
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => !!p)
    .map(unescape)
    .filter((p) => p === dir || p.startsWith(dir + '/'));
  return [...new Set(points)].sort((a, b) => b.split('/').length - a.split('/').length || b.localeCompare(a));
}

/** Loop devices whose backing file is under `dir`. */
async function loopsUnder(dir: string): Promise<string[]> {
  const r = await tryRun('losetup', ['-n', '-l', '-O', 'NAME,BACK-FILE']);
  if (!r) return [];
  return r.stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter(([name, file]) => name && file && (file === dir || file.startsWith(dir + '/')))
    .map(([name]) => name);
}

export interface CleanReport {
  containers: string[];
  mounts: string[];
  loops: string[];
  lxcfs: boolean;
  network: string;
  purged: boolean;
}

export async function cleanHost(cfg: RuntimeSettings, out: (line: string) => void, purge = false): Promise<CleanReport> {
  const lock = await lockHost(hostClaims(cfg));
  try {
    const dir = existsSync(cfg.dataDir) ? realpathSync(cfg.dataDir) : cfg.dataDir;
    const report: CleanReport = { containers: [], mounts: [], loops: [], lxcfs: false, network: '', purged: false };
    const runcRoot = join(dir, 'runc');
    if (existsSync(runcRoot)) {
      const runc = new Runc(runcRoot);
      for (const { id } of await runc.list()) {
        await runc.kill(id, 'KILL', true);
        await runc.delete(id, true);
        report.containers.push(id);
      }
    }
    out(`containers removed: ${report.containers.length ? report.containers.join(', ') : 'none'}`);
    const pidFile = join(dir, 'runtime', 'lxcfs.pid');
    const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) : 0;
    if (pid > 1 && alive(pid)) {
      process.kill(pid, 'SIGKILL');
      report.lxcfs = true;
    }
    out(report.lxcfs ? `lxcfs (pid ${pid}) ended` : 'lxcfs: not running');
    for (const m of mountsUnder(dir)) {
      if (!(await tryRun('umount', [m]))) await run('umount', ['-l', m]);
      report.mounts.push(m);
    }
    out(`mounts removed: ${report.mounts.length}`);
    for (const loop of await loopsUnder(dir)) {
      await tryRun('losetup', ['-d', loop]);
      report.loops.push(loop);
    }
    out(`loop devices detached: ${report.loops.length ? report.loops.join(', ') : 'none'}`);
    await new Network(cfg.runtime).teardown();
    report.network = `bridge ${cfg.runtime.bridge}, nft tables inet/bridge ${cfg.runtime.nftTable}`;
    out(`removed ${report.network}`);
    if (purge) {
      rmSync(dir, { recursive: true, force: true });
      report.purged = true;
      out(`removed ${dir}`);
    } else out(`kept the data in ${dir} (--purge removes it)`);
    return report;
  } finally {
    await lock.release();
  }
}
