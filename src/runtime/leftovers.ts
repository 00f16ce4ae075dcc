// Host commands a killed daemon left running. A SIGKILLed daemon's children (mkfs, mount, runc
// create, runc exec of an SSH session…) are not killed with it (systemd's KillMode=process, or
// any plain kill), and one that finishes after the next daemon's reconcile would recreate what
// reconcile just removed: a mount, a container, a loop device. So reconcile first ends them.
// A leftover is a process running one of the tools the runtime spawns with an argument inside
// this daemon's data dir (runc's state root, a server's disk or rootfs, the helper binary).

import { readFileSync, readdirSync } from 'node:fs';
import { basename } from 'node:path';

const TOOLS = new Set(['runc', 'mount', 'umount', 'mkfs.ext4', 'mke2fs', 'e2fsck', 'resize2fs', 'losetup', 'nsenter']);

function cmdline(pid: number): string[] | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return raw ? raw.replace(/\0$/, '').split('\0') : undefined;
  } catch {
    return undefined;
  }
}

/** Pids of runtime commands touching dataDir that this process did not start. */
export function leftoverCommands(dataDir: string, helperDir: string): number[] {
  const inside = (a: string) => a === dataDir || a.startsWith(dataDir + '/');
  const mine = new Set([process.pid, process.ppid]);
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (mine.has(pid)) continue;
    const argv = cmdline(pid);
    if (!argv?.length) continue;
    const tool = TOOLS.has(basename(argv[0])) || argv[0].startsWith(helperDir + '/');
    if (tool && argv.some(inside) && parentIsNotMe(pid)) out.push(pid);
  }
  return out;
}

/** State letter and parent pid from /proc/<pid>/stat. */
function stat(pid: number): { state: string; ppid: number } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { state: f[0], ppid: Number(f[1]) };
  } catch {
    return undefined;
  }
}

const parentIsNotMe = (pid: number) => {
  const s = stat(pid);
  return !!s && s.ppid !== process.pid;
};

/** Running or sleeping; a zombie has ended (its parent reaps it). */
const alive = (pid: number) => {
  const s = stat(pid);
  return !!s && s.state !== 'Z';
};

/** Kills the leftovers and waits (bounded) until they are gone; returns their command lines. */
export async function endLeftovers(dataDir: string, helperDir: string, waitMs = 10_000): Promise<string[]> {
  const pids = leftoverCommands(dataDir, helperDir);
  const what = pids.map((p) => (cmdline(p) ?? []).slice(0, 4).join(' '));
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  const deadline = Date.now() + waitMs;
  while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return what;
}
