// runc, one function per verb (go-runc style), all under one state root so the daemon only ever
// sees its own containers. Detached containers get /dev/null as stdio (never a pipe of the
// daemon's, which would die with it); runc's own errors go to a per-bundle JSON log read back on
// failure.

import { constants, existsSync, openSync, readFileSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { alive, CommandError, run, tryRun } from './proc.js';

export interface RuncState {
  id: string;
  pid: number;
  status: 'creating' | 'created' | 'running' | 'paused' | 'stopped';
  bundle: string;
}

export class Runc {
  constructor(readonly root: string) {}

  private args(...rest: string[]): string[] {
    return ['--root', this.root, ...rest];
  }

  private lastLogError(bundle: string): string {
    try {
      const lines = readFileSync(join(bundle, 'runc.log'), 'utf8').trim().split('\n').reverse();
      for (const l of lines) {
        const rec = JSON.parse(l) as { level?: string; msg?: string };
        if (rec.level === 'error' && rec.msg) return rec.msg;
      }
    } catch {
      /* no log */
    }
    return '';
  }

  /** `runc create`: namespaces and init set up, user process not started. Returns init's pid,
   *  read from runc's state file (no --pid-file: runc writes that one O_SYNC, a disk flush on every
   *  wake). */
  async create(id: string, bundle: string): Promise<number> {
    const log = join(bundle, 'runc.log');
    rmSync(log, { force: true });
    try {
      await run('runc', ['--root', this.root, '--log', log, '--log-format', 'json', 'create', '--bundle', bundle, id], {
        timeoutMs: 60_000,
        detachedStdio: true,
      });
    } catch (e) {
      if (!(e instanceof CommandError)) throw e;
      throw new CommandError(e.command, e.args, { exitCode: e.exitCode, signal: e.signal, stderr: this.lastLogError(bundle) || e.stderr });
    }
    const pid = this.initOf(id)?.pid;
    if (!pid) throw new CommandError('runc', this.args('create', id), { exitCode: 0, stderr: 'runc create left no state' });
    return pid;
  }

  /** Init's pid and start time (clock ticks since boot) from runc's state file. */
  private initOf(id: string): { pid: number; start: number } | undefined {
    try {
      const st = JSON.parse(readFileSync(join(this.root, id, 'state.json'), 'utf8')) as { init_process_pid?: unknown; init_process_start?: unknown };
      const pid = Number(st.init_process_pid);
      return pid > 0 ? { pid, start: Number(st.init_process_start) } : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The pid of the container's init when it is `created` and waiting to be started (its
   * exec.fifo there and the same process alive: pid and start time as runc recorded them), read
   * from files without spawning runc; undefined otherwise.
   */
  createdInit(id: string): number | undefined {
    const init = this.initOf(id);
    if (!init || !existsSync(join(this.root, id, 'exec.fifo'))) return undefined;
    return liveInit(init) ? init.pid : undefined;
  }

  /** Whether the container's init runs (the process runc recorded, by pid and start time, alive
   *  and no zombie), read from files without spawning runc: false for a container whose init
   *  ended — killed from outside the runtime, say — or that runc does not have. */
  initAlive(id: string): boolean {
    const init = this.initOf(id);
    return !!init && liveInit(init);
  }

  /** Whether runc has state for the container (a file check, no process). */
  exists(id: string): boolean {
    return existsSync(join(this.root, id, 'state.json'));
  }

  /**
   * `runc start`, done as runc does it without spawning runc (about 10 ms of a wake): the created
   * container's init waits to open `<root>/<id>/exec.fifo` for writing; opening it for reading
   * lets it go on, it writes one byte and execs the user process, and the fifo is removed (which
   * is how runc tells `running` from `created`). Without the fifo (another runc's layout) or when
   * `initPid` is unknown, it runs `runc start`. Throws when init ends before it was started.
   */
  async start(id: string, initPid?: number): Promise<void> {
    const fifo = join(this.root, id, 'exec.fifo');
    let fd: number;
    try {
      if (!initPid) throw new Error('no pid');
      fd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch {
      await run('runc', this.args('start', id));
      return;
    }
    const got = await new Promise<number>((resolve, reject) => {
      const s = new Socket({ fd, readable: true, writable: false });
      let n = 0;
      // like runc: check now and then that init has not ended without ever opening the fifo
      const watch = setInterval(() => {
        if (!alive(initPid)) s.destroy(new Error('container init ended before it was started'));
      }, 50);
      s.on('data', (d: Buffer) => (n += d.length));
      s.once('end', () => (clearInterval(watch), s.destroy(), resolve(n)));
      s.once('error', (e) => (clearInterval(watch), reject(e)));
    }).catch((e: Error) => {
      throw new CommandError('runc', this.args('start', id), { exitCode: null, stderr: e.message });
    });
    if (got === 0) throw new CommandError('runc', this.args('start', id), { exitCode: null, stderr: 'container init ended before it was started' });
    rmSync(fifo, { force: true });
  }

  async kill(id: string, signal: string, all = false): Promise<boolean> {
    return (await tryRun('runc', this.args('kill', ...(all ? ['--all'] : []), id, signal))) !== null;
  }

  async delete(id: string, force = false): Promise<void> {
    await run('runc', this.args('delete', ...(force ? ['--force'] : []), id));
  }

  async state(id: string): Promise<RuncState | undefined> {
    const r = await tryRun('runc', this.args('state', id));
    return r ? (JSON.parse(r.stdout) as RuncState) : undefined;
  }

  async list(): Promise<RuncState[]> {
    const r = await run('runc', this.args('list', '--format', 'json'));
    return (JSON.parse(r.stdout || 'null') as RuncState[] | null) ?? [];
  }

  /** Live memory limit (cgroup v1: memory.limit_in_bytes; memsw left alone, the host has no swap). */
  async updateMemory(id: string, bytes: number): Promise<void> {
    await run('runc', this.args('update', '--memory', String(bytes), id));
  }

  /** argv (after the runc binary) of `runc exec` for a process in a running container. */
  /** `cgroup`: a sub-cgroup of the container's that must exist (`[<controller>:]<path>`). */
  execArgs(
    id: string,
    o: { tty: boolean; argv: string[]; env?: Record<string, string>; cwd?: string; processJson?: string; preserveFds?: number; cgroup?: string },
  ): string[] {
    const env = Object.entries(o.env ?? {}).flatMap(([k, v]) => ['--env', `${k}=${v}`]);
    const fds = o.preserveFds ? ['--preserve-fds', String(o.preserveFds)] : [];
    const cg = o.cgroup ? ['--cgroup', o.cgroup] : [];
    return this.args('exec', ...(o.tty ? ['-t'] : []), ...fds, ...cg, ...(o.cwd ? ['--cwd', o.cwd] : []), ...env, id, ...o.argv);
  }
}

/** Whether the process runc recorded as a container's init is that process, alive (not a zombie). */
function liveInit(init: { pid: number; start: number }): boolean {
  try {
    const stat = readFileSync(`/proc/${init.pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return f[0] !== 'Z' && Number(f[19]) === init.start; // field 22: starttime
  } catch {
    return false;
  }
}
