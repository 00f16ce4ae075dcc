// The kernel's OOM kills, made visible to the server's user. Every couple of seconds the watch
// reads the oom_kill counter of each running server's memory cgroup (one small file per server:
// memory.oom_control on cgroup v1, memory.events on v2). When it grew, the daemon appends one line
// per kill to /var/log/rootbox.log inside the server (rootfile.ts: never through a user's
// symlink), naming the killed program when the kernel log says it (/dev/kmsg's `oom-kill:` line of
// the server's cgroup) and the server's memory limit; hosting's logs endpoint counts those lines.
// A cgroup made anew (the server slept and woke) starts its counter at 0: the watch tells the
// cgroups apart by their directory's inode.

import { closeSync, constants, existsSync, openSync, readFileSync, readSync, statSync } from 'node:fs';
import type { Logger } from '../log/index.js';
import { Periodic } from './periodic.js';
import { appendIn, readTail } from './rootfile.js';
import type { RuntimeServer } from './types.js';

export const ROOTBOX_LOG = '/var/log/rootbox.log';
/** The words every OOM line of rootbox.log carries (the logs endpoint counts them). */
export const OOM_MARK = 'out of memory:';
/** First line of a rootbox.log started anew, followed by the number of kills before. */
const OOM_BEFORE = 'log started anew at 1 MiB; out-of-memory kills before: ';
const LOG_MAX = 1024 * 1024;

/** OOM kills a rootbox.log tells: its lines with OOM_MARK, plus the count carried by its first line. */
export function oomKillsIn(log: string): number {
  const lines = log.split('\n');
  const before = lines[0]?.includes(OOM_BEFORE) ? Number(lines[0].slice(lines[0].indexOf(OOM_BEFORE) + OOM_BEFORE.length)) || 0 : 0;
  return before + lines.filter((l) => l.startsWith('[rootbox ') && l.includes(OOM_MARK)).length;
}

export interface OomWatchOptions {
  /** The servers as the runtime sees them now. */
  servers: () => RuntimeServer[];
  /** A server's cgroup path on this daemon (spec.ts cgroupPath). */
  cgroup: (id: string) => string;
  log: Logger;
  /** Poll period (default 2 s). */
  everyMs?: number;
}

interface Seen {
  ino: number;
  kills: number;
}

const MiB = 1024 * 1024;

export class OomWatch extends Periodic {
  private readonly seen = new Map<string, Seen>();
  /** OOM lines written since start (for the host log and tests). */
  written = 0;

  constructor(private readonly o: OomWatchOptions) {
    super('oom watch', o);
  }

  /** One look at every running server's counter. */
  protected async look(): Promise<void> {
    const running = this.o.servers().filter((s) => s.state === 'running');
    const ids = new Set(running.map((s) => s.id));
    for (const id of this.seen.keys()) if (!ids.has(id)) this.seen.delete(id);
    for (const s of running) {
      const c = oomCounter(this.o.cgroup(s.id));
      if (!c) continue;
      const { ino, kills } = c;
      const before = this.seen.get(s.id);
      this.seen.set(s.id, { ino, kills });
      // at the daemon's start the kills so far were reported by the daemon before it
      const base = before?.ino === ino ? before.kills : this.first ? kills : 0;
      if (kills > base) await this.report(s, kills - base, kills);
    }
  }

  private async report(s: RuntimeServer, count: number, total: number): Promise<void> {
    const victims = kernelVictims(this.o.cgroup(s.id), s.uidBase).slice(-count);
    const at = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const limit = `${Math.round(s.memoryBytes / MiB)} MiB`;
    let text = '';
    for (let i = 0; i < count; i++) {
      const v = victims[i - (count - victims.length)];
      const who = v ? `${v.task}${v.uid !== undefined ? ` (uid ${v.uid})` : ''}` : 'a process';
      text += `[rootbox ${at}] ${OOM_MARK} the kernel killed ${who}: this server's memory limit is ${limit}\n`;
    }
    const ok = await appendRootboxLog(s, text);
    this.written += count;
    this.o.log.warn('server process killed for memory', { server: s.id, kills: count, total, victims: victims.map((v) => v.task), logged: ok });
  }
}

/** Appends lines to the server's /var/log/rootbox.log (rootfile.ts: never through a user's
 *  symlink). The log stays small: past 1 MiB it starts anew, its first line carrying the count of
 *  OOM kills so far. False when the file cannot be reached. */
export async function appendRootboxLog(s: Pick<RuntimeServer, 'rootfs' | 'uidBase'>, text: string): Promise<boolean> {
  const old = await readTail(s.rootfs, ROOTBOX_LOG, LOG_MAX + 1);
  const full = !!old && old.length > LOG_MAX;
  if (full) text = `[rootbox ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}] ${OOM_BEFORE}${oomKillsIn(old.toString('utf8'))}\n${text}`;
  return appendIn(s.rootfs, ROOTBOX_LOG, text, { uid: s.uidBase, gid: s.uidBase }, full);
}

const V2 = existsSync('/sys/fs/cgroup/cgroup.controllers');

/** A memory cgroup's OOM-kill counter and its directory's inode (one stat, one small read). */
function oomCounter(path: string): Seen | undefined {
  const dir = V2 ? `/sys/fs/cgroup${path}` : `/sys/fs/cgroup/memory${path}`;
  try {
    const ino = statSync(dir).ino;
    const text = readFileSync(`${dir}/${V2 ? 'memory.events' : 'memory.oom_control'}`, 'utf8');
    return { ino, kills: Number(/^oom_kill (\d+)$/m.exec(text)?.[1] ?? 0) };
  } catch {
    return undefined;
  }
}

/** The kernel's `oom-kill:` summaries for a memory cgroup, oldest first (best effort: empty when
 *  /dev/kmsg cannot be read). uid is the container's (host uid − uidBase). */
function kernelVictims(cgroup: string, uidBase: number): { task: string; uid?: number }[] {
  const out: { task: string; uid?: number }[] = [];
  let fd: number;
  try {
    fd = openSync('/dev/kmsg', constants.O_RDONLY | constants.O_NONBLOCK); // one record per read, EAGAIN at the end
  } catch {
    return out;
  }
  const buf = Buffer.alloc(8192);
  try {
    for (let i = 0; i < 100_000; i++) {
      let n: number;
      try {
        n = readSync(fd, buf, 0, buf.length, null);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EPIPE') continue; // overwritten records
        break; // EAGAIN: the end
      }
      if (n <= 0) break;
      const rec = buf.toString('utf8', 0, n);
      const msg = rec.slice(rec.indexOf(';') + 1);
      if (!msg.startsWith('oom-kill:') || !msg.includes(`task_memcg=${cgroup},`)) continue;
      const task = /,task=([^,]*),/.exec(msg)?.[1] ?? 'a process';
      const m = /,uid=(-?\d+)/.exec(msg);
      const uid = m ? Number(m[1]) >>> 0 : undefined; // the kernel prints it as a signed int
      out.push({
        task: task.replace(/[^\x20-\x7e]/g, '?').slice(0, 64),
        uid: uid !== undefined && uid >= uidBase && uid - uidBase < 65536 ? uid - uidBase : uid,
      });
    }
  } finally {
    closeSync(fd);
  }
  return out;
}
