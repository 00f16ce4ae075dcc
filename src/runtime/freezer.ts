// The cgroup freezer of a server (doze): freeze() stops every process of the container where it
// stands — memory, sockets and open files kept, no CPU — and thaw() lets them go on. It writes
// the cgroup's own control file (no runc spawn: a freeze is a write and reads until it holds, a thaw one write), on cgroup
// v1 (freezer.state: FROZEN / THAWED, FREEZING in between) or v2 (cgroup.freeze 1/0, done when
// cgroup.events says `frozen 1`). runc sees the same state (`paused`), so runc kill/delete know it.
// A freeze outlives the daemon: a restart adopts frozen servers as dozing (Runtime.frozen); only
// a freeze cut short half-way is undone (settle).
// A thaw is on a dozing server's first byte, so it is kept to one write: the control file a
// freeze opened stays open until the thaw (the open is ~0.07 ms on an idle host), and on v1 an
// empty cgroup kept frozen beside the servers (pin) spares each doze and thaw the kernel's
// flip of its freezer key.

import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmdirSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { InternalError } from '../errors.js';
import { sleep } from './proc.js';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));
/** How long a freeze may take before it is given up (a task stuck in an uninterruptible wait). */
const FREEZE_LIMIT_MS = 2000;

const control = (path: string) => (V2 ? join(ROOT, path, 'cgroup.freeze') : join(ROOT, 'freezer', path, 'freezer.state'));
const value = (frozen: boolean) => (V2 ? (frozen ? '1' : '0') : frozen ? 'FROZEN' : 'THAWED');

/** The open control file of each cgroup frozen by freeze(), until its thaw (or its removal: forget). */
const held = new Map<string, number>();

/** Told of each cgroup this process thaws (thaw, settle), once the call that thawed it is done. */
const thawWatchers = new Set<(path: string) => void>();

/** Calls `fn` with the path of every cgroup thawed from now on (after the thawing call returns);
 *  the returned function stops it. */
export function watchThaws(fn: (path: string) => void): () => void {
  thawWatchers.add(fn);
  return () => void thawWatchers.delete(fn);
}

function tellThawed(path: string): void {
  if (thawWatchers.size === 0) return;
  queueMicrotask(() => {
    for (const fn of thawWatchers) {
      try {
        fn(path);
      } catch (e) {
        process.emitWarning(e as Error); // one watcher's failure costs the others nothing
      }
    }
  });
}

/** Whether the cgroup is frozen now (false when it does not exist). */
export function isFrozen(path: string): boolean {
  try {
    if (V2) return /^frozen 1$/m.test(readFileSync(join(ROOT, path, 'cgroup.events'), 'utf8'));
    return readFileSync(control(path), 'utf8').trim() === 'FROZEN';
  } catch {
    return false;
  }
}

function write(path: string, frozen: boolean, missingOk = false): void {
  const file = control(path);
  try {
    // missingOk: opened without O_CREAT, so a cgroup that is gone is ENOENT (one syscall less than a look first)
    writeFileSync(file, value(frozen), { flag: missingOk ? 'r+' : 'w' });
  } catch (e) {
    if (missingOk && (e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new InternalError(frozen ? 'a server cgroup could not be frozen' : 'a server cgroup could not be thawed', { file }, { cause: e });
  }
}

/** Freezes every task of the cgroup; resolves once all are frozen. A freeze that does not
 *  complete in time is undone and throws (the server keeps running). The control file stays
 *  open for the thaw. */
export async function freeze(path: string): Promise<void> {
  forget(path);
  let fd: number;
  try {
    fd = openSync(control(path), 'r+');
  } catch (e) {
    throw new InternalError('a server cgroup could not be frozen', { file: control(path) }, { cause: e });
  }
  held.set(path, fd);
  try {
    writeSync(fd, value(true));
    const deadline = Date.now() + FREEZE_LIMIT_MS;
    for (let wait = 0; !isFrozen(path); wait = Math.min(20, wait + 1)) {
      if (Date.now() > deadline) throw new InternalError('a server cgroup did not freeze in time', { path, ms: FREEZE_LIMIT_MS });
      if (!V2) writeSync(fd, value(true)); // v1: a FREEZING cgroup is pushed on by writing FROZEN again
      await sleep(wait);
    }
  } catch (e) {
    thaw(path); // the server keeps running
    throw e instanceof InternalError ? e : new InternalError('a server cgroup could not be frozen', { file: control(path) }, { cause: e });
  }
}

/** Undoes a freeze a crash cut short (asked for, not complete: some tasks frozen, some not), so a
 *  server is either frozen whole (a doze, kept across a restart) or running. */
export function settle(path: string): void {
  try {
    const asked = readFileSync(control(path), 'utf8').trim();
    if ((V2 ? asked === '1' : asked === 'FREEZING') && !isFrozen(path)) (write(path, false), tellThawed(path));
  } catch {
    // no such cgroup: nothing was frozen
  }
}

/** Thaws the cgroup (nothing to do when it is not frozen or does not exist): one write on the
 *  file its freeze left open, else on the file opened now. */
export function thaw(path: string): void {
  tellThawed(path);
  const fd = held.get(path);
  if (fd === undefined) return write(path, false, true);
  held.delete(path);
  try {
    writeSync(fd, value(false));
  } catch {
    write(path, false, true); // that cgroup is gone (ENODEV): this path's, if any, is thawed by name
  } finally {
    closeSync(fd);
  }
}

/** Closes the control file a freeze left open for `path` (its cgroup is being removed). */
export function forget(path: string): void {
  const fd = held.get(path);
  if (fd === undefined) return;
  held.delete(path);
  closeSync(fd);
}

/** The empty cgroup kept frozen under a daemon's cgroup parent (pin). */
const PIN = 'freezer-pin';

/**
 * cgroup v1 counts the frozen cgroups of the host in a kernel static key: the first freeze and
 * the last thaw flip it, and a flip patches kernel text with a synchronous interrupt to every
 * CPU. On a 2-vCPU VM with idle CPUs that cost a lone dozing server 0.15 ms of each thaw and
 * freeze (0.26 → 0.11 ms). An empty cgroup kept frozen under `parent` keeps the key on. Best
 * effort: false when it could not be made (dozes work, only slower). v2 has no such key.
 */
export function pin(parent: string): boolean {
  if (V2) return true;
  const dir = join(ROOT, 'freezer', parent, PIN);
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'freezer.state'), 'FROZEN');
    return true;
  } catch {
    return false;
  }
}

/** Removes the pin (the daemon's stop): its cgroup parent can then be removed when empty. */
export function unpin(parent: string): void {
  if (V2) return;
  const dir = join(ROOT, 'freezer', parent, PIN);
  try {
    writeFileSync(join(dir, 'freezer.state'), 'THAWED');
    rmdirSync(dir);
  } catch {
    // never made, or gone
  }
}

/**
 * The freezer side of one daemon's servers, all under its cgroup `parent`: the pin from its first
 * freeze until close, and each thaw of one of them, by anyone in this process, told by server id.
 */
export class ServerFreezer {
  private pinned = false;
  private readonly listeners = new Set<(id: string) => void>();
  private readonly unwatch: () => void;

  constructor(
    private readonly parent: string,
    private readonly warn: (msg: string) => void,
  ) {
    const mine = `${parent}/`;
    this.unwatch = watchThaws((path) => {
      if (path.startsWith(mine)) for (const fn of this.listeners) fn(path.slice(mine.length));
    });
  }

  /** freeze(), the pin made first the first time. */
  freeze(path: string): Promise<void> {
    if (!this.pinned) {
      this.pinned = true;
      if (!pin(this.parent)) this.warn('the freezer pin cgroup could not be made: each doze and thaw takes ~0.15 ms more');
    }
    return freeze(path);
  }

  onThawed(fn: (id: string) => void): void {
    this.listeners.add(fn);
  }

  /** Stops telling thaws and removes the pin (one a killed daemon left too). */
  close(): void {
    this.unwatch();
    unpin(this.parent);
  }
}
