// One exec's own cgroup. Every `runc exec` into a server runs in a child cgroup of the server's
// (cgroup v1: `exec-<hex>` under the server's freezer cgroup; v2: the same name under its unified
// one), given to runc with `--cgroup`. Whatever the command starts — in the background, in new
// sessions, a fork bomb — stays in it (a server's /sys/fs/cgroup is read-only), and still counts
// against the server's limits (the hierarchy). So the host can end all of it without starting a
// process inside the server, where none may start when its pids are all taken: freeze the
// cgroup, SIGKILL every process in it, thaw, wait until it is empty (kill()). Other signals go to
// the command's process group only, as before: to the exec wrapper (rbx-exec), which forwards
// them (signal()). When the exec ends by itself, what it left running (a nohup'd daemon) is moved
// to the server's own cgroup and the exec's cgroup removed (release()). A daemon that ended
// meanwhile leaves exec cgroups behind: the next one's reconcile releases those of the servers it
// adopts running (existing()), and runc removes them with the server's at its stop or delete.

import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmdirSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { sleep } from './proc.js';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));
/** How long a kill may wait for the cgroup to empty (a task in an uninterruptible wait). */
const KILL_LIMIT_MS = 5000;
/** How long the freeze before a kill may take before the kill goes on without it. */
const FREEZE_LIMIT_MS = 1000;
/** How long the spared wrapper may take to report and exit once its command is gone. */
const TOP_GRACE_MS = 1000;

const readPids = (file: string): number[] => {
  try {
    return readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
};

const signalPid = (pid: number, sig: NodeJS.Signals): void => {
  try {
    process.kill(pid, sig);
  } catch {
    /* gone */
  }
};

/** The pid namespace of a process (undefined when it is gone). */
const pidNs = (pid: number): string | undefined => {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return undefined;
  }
};

/** Whether `pid` came into the server from outside its pid namespace (its parent is runc on the
 *  host): the top process of a `runc exec`, the wrapper when there is one. Orphans of the server
 *  are re-parented to its init, which is inside. */
function fromOutside(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const own = pidNs(pid);
    const parent = pidNs(ppid);
    return !!own && !!parent && own !== parent;
  } catch {
    return false;
  }
}

export class ExecGroup {
  private killing: Promise<void> | undefined;
  private released = false;

  private constructor(
    /** The server's cgroup dir in the hierarchy used (v1: freezer). */
    private readonly parent: string,
    readonly name: string,
  ) {}

  /** A new exec cgroup under the server's `serverCgroup` (cgroupPath), or undefined when it
   *  cannot be made (no such cgroup): the exec then runs in the server's cgroup itself. */
  static open(serverCgroup: string): ExecGroup | undefined {
    const parent = V2 ? join(ROOT, serverCgroup) : join(ROOT, 'freezer', serverCgroup);
    const name = `exec-${randomBytes(8).toString('hex')}`;
    try {
      mkdirSync(join(parent, name));
    } catch {
      return undefined;
    }
    return new ExecGroup(parent, name);
  }

  /** The exec cgroups under the server's `serverCgroup` now (a daemon before this one made them). */
  static existing(serverCgroup: string): ExecGroup[] {
    const parent = V2 ? join(ROOT, serverCgroup) : join(ROOT, 'freezer', serverCgroup);
    try {
      return readdirSync(parent)
        .filter((n) => n.startsWith('exec-'))
        .map((n) => new ExecGroup(parent, n));
    } catch {
      return [];
    }
  }

  /** The value of `runc exec --cgroup`. */
  get runcFlag(): string {
    return V2 ? this.name : `freezer:${this.name}`;
  }

  private get dir(): string {
    return join(this.parent, this.name);
  }

  /** The processes in the cgroup now (host pids). */
  pids(): number[] {
    return readPids(join(this.dir, 'cgroup.procs'));
  }

  private top(): number | undefined {
    return this.pids().find(fromOutside);
  }

  /** Sends `sig` to the command from the host: to its top process, the wrapper when there is one
   *  (it forwards the signal to the command's process group). Nothing when it has ended. */
  signal(sig: NodeJS.Signals): void {
    const top = this.top();
    if (top) signalPid(top, sig);
  }

  private setFrozen(frozen: boolean): void {
    try {
      if (V2) writeFileSync(join(this.dir, 'cgroup.freeze'), frozen ? '1' : '0');
      else writeFileSync(join(this.dir, 'freezer.state'), frozen ? 'FROZEN' : 'THAWED');
    } catch {
      /* gone, or being removed */
    }
  }

  private isFrozen(): boolean {
    try {
      if (V2) return /^frozen 1$/m.test(readFileSync(join(this.dir, 'cgroup.events'), 'utf8'));
      return readFileSync(join(this.dir, 'freezer.state'), 'utf8').trim() === 'FROZEN';
    } catch {
      return false;
    }
  }

  /** Freezes the cgroup; false when it did not freeze in time (it is left asking to). */
  private async freeze(): Promise<boolean> {
    this.setFrozen(true);
    const deadline = Date.now() + FREEZE_LIMIT_MS;
    for (let wait = 0; !this.isFrozen(); wait = Math.min(20, wait + 2)) {
      if (Date.now() > deadline) return false;
      if (!V2) this.setFrozen(true); // v1: a FREEZING cgroup is pushed on by writing FROZEN again
      await sleep(wait);
    }
    return true;
  }

  /**
   * Ends every process in the cgroup: frozen (none forks meanwhile), SIGKILLed, thawed, until none
   * is left. With `spareTop` (the top is the wrapper) the top is killed last, after TOP_GRACE_MS,
   * so that it can report how its command ended. Resolves when the cgroup is empty or after
   * KILL_LIMIT_MS.
   */
  kill(spareTop: boolean): Promise<void> {
    return (this.killing ??= this.killAll(spareTop).finally(() => (this.killing = undefined)));
  }

  private async killAll(spareTop: boolean): Promise<void> {
    const start = Date.now();
    const top = spareTop ? this.top() : undefined;
    // Frozen while listed and signalled (a round that found some to kill): nothing forks between
    // the listing and the kill, so a round leaves no process it did not see.
    let busy = true;
    while (Date.now() - start < KILL_LIMIT_MS) {
      const spare = Date.now() - start < TOP_GRACE_MS ? top : undefined;
      if (busy) await this.freeze();
      const left = this.pids();
      const victims = left.filter((p) => p !== spare);
      for (const p of victims) signalPid(p, 'SIGKILL');
      if (busy) this.setFrozen(false);
      if (!left.length) return;
      busy = victims.length > 0;
      await sleep(busy ? 10 : 20);
    }
  }

  /** The exec has ended: what it left running goes to the server's own cgroup (frozen while it
   *  moves, so nothing forked meanwhile stays behind), and the cgroup is removed. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    await this.killing;
    for (let i = 0; i < 20; i++) {
      const left = this.pids();
      if (left.length) {
        await this.freeze();
        for (const p of this.pids()) {
          try {
            writeFileSync(join(this.parent, 'cgroup.procs'), String(p));
          } catch {
            /* gone */
          }
        }
      }
      try {
        rmdirSync(this.dir);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      }
      await sleep(10);
    }
  }
}
