// lxcfs: the servers' own view of memory, CPU, uptime and load in /proc. One FUSE instance for the
// host, the daemon's, mounted at <dataDir>/lxcfs; each server's bundle bind-mounts seven of its
// files over /proc (spec.ts), so `free`, `top`, `uptime`, `/proc/meminfo`, `/proc/loadavg` and
// `/proc/stat` inside a server answer from the server's cgroup (lxcfs looks up the cgroup of the
// process that reads, which works across the servers' user namespaces: the FUSE request names the
// reader's host pid).
//
// The bind sources always exist, so a server boots whatever state lxcfs is in: under the mount
// point sit placeholder symlinks <dir>/proc/<file> → /proc/<file>, hidden while lxcfs is mounted
// over them; without lxcfs (not installed, no /dev/fuse, or dead) a server starting then sees the
// host's figures, as before, and the daemon logs a warning.
//
// The Lxcfs part starts it (or reuses a healthy one already mounted there, e.g. left running by
// the previous daemon), restarts it with backoff when it dies or its mount goes stale (ENOTCONN),
// and at stop ends it and unmounts only when no container of this data dir is left (a production
// daemon stops with its containers running: their /proc files stay served). Servers running
// while an instance died keep a dead view (ENOTCONN on those files) until their next start.

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, statSync, symlinkSync, truncateSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../log/index.js';
import { tryRun, alive, sleep } from './proc.js';

/** The /proc files lxcfs virtualises that each server gets (runc allows binds over exactly these). */
export const LXCFS_PROC_FILES = ['meminfo', 'cpuinfo', 'stat', 'uptime', 'loadavg', 'diskstats', 'swaps'] as const;

export const lxcfsDir = (dataDir: string) => join(dataDir, 'lxcfs');

const unoctal = (s: string) => s.replace(/\\(\d{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));

/** Filesystem type mounted at `dir` (the topmost mount), or undefined. */
function mountedType(dir: string): string | undefined {
  let type: string | undefined;
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-');
    if (dash > 5 && unoctal(f[4]) === dir) type = f[dash + 1];
  }
  return type;
}

export type LxcfsState = 'serving' | 'stale' | 'absent';

/** serving: lxcfs answers at `dir`; stale: a FUSE mount whose daemon is gone (ENOTCONN) or that
 *  serves nothing; absent: nothing mounted there. */
export function lxcfsState(dir: string): LxcfsState {
  const type = mountedType(dir);
  if (!type) return 'absent';
  if (!type.startsWith('fuse')) return 'stale';
  try {
    return statSync(join(dir, 'proc', 'meminfo')).isFile() ? 'serving' : 'stale';
  } catch {
    return 'stale';
  }
}

/** The bind source directory of a data dir, with its placeholders in place when nothing is
 *  mounted over it. Cheap when all is there (a stat per file); returns the directory. */
export function ensureLxcfsDir(dataDir: string): string {
  const dir = lxcfsDir(dataDir);
  const proc = join(dir, 'proc');
  if (LXCFS_PROC_FILES.every((f) => existsSync(join(proc, f)))) return dir;
  if (mountedType(dir)) return dir; // lxcfs (or a stale mount the part replaces): never write into it
  mkdirSync(proc, { recursive: true, mode: 0o755 });
  for (const f of LXCFS_PROC_FILES) {
    const p = join(proc, f);
    if (isLink(p)) continue;
    symlinkSync(`/proc/${f}`, `${p}.tmp`);
    renameSync(`${p}.tmp`, p);
  }
  return dir;
}

function isLink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

export interface LxcfsOptions {
  dataDir: string;
  log: Logger;
  /** The lxcfs program (default: `lxcfs` on PATH). */
  binary?: string;
  /** Health check period (default 5 s). */
  checkMs?: number;
}

const MIN_BACKOFF = 500;
const MAX_BACKOFF = 60_000;

/** Starts, supervises and stops the host's lxcfs (see the header). */
export class Lxcfs {
  readonly dir: string;
  private child?: ChildProcess;
  private timer?: NodeJS.Timeout;
  private stopping = false;
  private busy = false;
  private backoff = MIN_BACKOFF;
  private nextTry = 0;
  private servingSince = 0;
  private warned = false;
  private spawned = 0;
  /** Restarts after the first start (for tests and the log). */
  restarts = 0;

  constructor(private readonly o: LxcfsOptions) {
    this.dir = lxcfsDir(o.dataDir);
  }

  private get pidFile(): string {
    return join(this.o.dataDir, 'runtime', 'lxcfs.pid');
  }

  /** Whether servers starting now get lxcfs's view. */
  get serving(): boolean {
    return lxcfsState(this.dir) === 'serving';
  }

  /** lxcfs can run here: the program, FUSE and root. The reason when not. */
  static unavailable(binary = 'lxcfs'): string | undefined {
    if (process.getuid?.() !== 0) return 'the daemon is not root';
    if (!existsSync('/dev/fuse')) return '/dev/fuse is missing (modprobe fuse)';
    const onPath = binary.includes('/') ? existsSync(binary) : (process.env.PATH ?? '/usr/bin:/bin').split(':').some((d) => d && existsSync(join(d, binary)));
    if (!onPath) return 'lxcfs is not installed (apt-get install -y lxcfs)';
    return undefined;
  }

  async start(): Promise<void> {
    mkdirSync(join(this.o.dataDir, 'runtime'), { recursive: true });
    await this.check();
    const every = this.o.checkMs ?? 5000;
    this.timer = setInterval(() => void this.check(), every);
    this.timer.unref();
  }

  /** One supervision step: (re)start lxcfs when it is not serving and the backoff allows. */
  async check(): Promise<void> {
    if (this.busy || this.stopping) return;
    this.busy = true;
    try {
      const state = lxcfsState(this.dir);
      if (state === 'serving') {
        if (!this.servingSince) this.servingSince = Date.now();
        if (Date.now() - this.servingSince > MAX_BACKOFF) this.backoff = MIN_BACKOFF;
        return;
      }
      this.servingSince = 0;
      const why = Lxcfs.unavailable(this.o.binary);
      if (why) {
        if (!this.warned) this.o.log.warn("lxcfs unavailable: servers see the host's memory, CPU and uptime figures in /proc", { reason: why });
        this.warned = true;
        if (state === 'stale') await this.unmount();
        ensureLxcfsDir(this.o.dataDir);
        return;
      }
      if (Date.now() < this.nextTry) return;
      if (state === 'stale') {
        this.o.log.warn('lxcfs mount is stale; restarting lxcfs');
        await this.unmount();
      }
      ensureLxcfsDir(this.o.dataDir);
      await this.spawn();
    } catch (err) {
      this.o.log.error('lxcfs supervision failed', { err });
    } finally {
      this.busy = false;
    }
  }

  private async spawn(): Promise<void> {
    const first = this.spawned++ === 0;
    this.nextTry = Date.now() + this.backoff;
    this.backoff = Math.min(this.backoff * 2, MAX_BACKOFF);
    const logFile = join(this.o.dataDir, 'runtime', 'lxcfs.log');
    try {
      if (statSync(logFile).size > 1024 * 1024) truncateSync(logFile, 0);
    } catch {
      /* not there yet */
    }
    const err = openSync(logFile, 'a', 0o600);
    let child: ChildProcess;
    try {
      // Detached (own session): a production daemon that stops leaves it serving its running
      // servers; the next daemon finds it mounted and keeps it. -l: per-server load average.
      child = spawn(this.o.binary ?? 'lxcfs', ['-f', '-l', '-p', this.pidFile, this.dir], { detached: true, stdio: ['ignore', 'ignore', err] });
    } finally {
      closeSync(err);
    }
    child.unref();
    this.child = child;
    child.on('error', (e) => this.o.log.warn('lxcfs did not start', { err: e }));
    child.on('exit', (code, signal) => {
      if (this.child === child) this.child = undefined;
      if (this.stopping) return;
      this.o.log.warn('lxcfs exited; restarting it', { code, signal, inMs: Math.max(0, this.nextTry - Date.now()) });
      setTimeout(() => void this.check(), Math.max(0, this.nextTry - Date.now()) + 10).unref();
    });
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline && this.child === child && lxcfsState(this.dir) !== 'serving') await sleep(20);
    if (lxcfsState(this.dir) === 'serving') {
      if (!first) this.restarts++;
      this.o.log.info(first ? 'lxcfs started' : 'lxcfs restarted', { pid: child.pid });
    } else {
      this.o.log.warn('lxcfs did not mount within 5 s', { pid: child.pid, log: logFile });
    }
  }

  private async unmount(): Promise<void> {
    await tryRun('umount', ['-l', this.dir]);
  }

  private lxcfsPid(): number | undefined {
    if (this.child?.pid && this.child.exitCode === null) return this.child.pid;
    try {
      const pid = Number(readFileSync(this.pidFile, 'utf8').trim());
      return pid > 1 && readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'lxcfs' ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  /** Containers runc still holds in this data dir (running or frozen servers use the mount). */
  private containersLeft(): number {
    try {
      return readdirSync(join(this.o.dataDir, 'runc')).length;
    } catch {
      return 0;
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.timer);
    const left = this.containersLeft();
    if (left > 0) {
      this.o.log.info('lxcfs left running for the servers still running', { servers: left });
      return;
    }
    const pid = this.lxcfsPid();
    if (pid) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        /* gone */
      }
      const deadline = Date.now() + 3000;
      while (Date.now() < deadline && alive(pid)) await sleep(20);
      if (alive(pid)) process.kill(pid, 'SIGKILL');
    }
    if (mountedType(this.dir)) await this.unmount();
  }
}
