// The cgroup freezer of a server (doze): freeze() stops every process of the container where it
// stands — memory, sockets and open files kept, no CPU — and thaw() lets them go on. It writes
// the cgroup's own control file (no runc spawn: a thaw is one write and a read or two), on cgroup
// v1 (freezer.state: FROZEN / THAWED, FREEZING in between) or v2 (cgroup.freeze 1/0, done when
// cgroup.events says `frozen 1`). runc sees the same state (`paused`), so runc kill/delete know it.
// A freeze outlives the daemon: a restart adopts frozen servers as dozing (Runtime.frozen); only
// a freeze cut short half-way is undone (settle).

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { InternalError } from '../errors.js';
import { sleep } from './proc.js';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));
/** How long a freeze may take before it is given up (a task stuck in an uninterruptible wait). */
const FREEZE_LIMIT_MS = 2000;

const control = (path: string) => (V2 ? join(ROOT, path, 'cgroup.freeze') : join(ROOT, 'freezer', path, 'freezer.state'));

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
    writeFileSync(file, V2 ? (frozen ? '1' : '0') : frozen ? 'FROZEN' : 'THAWED', { flag: missingOk ? 'r+' : 'w' });
  } catch (e) {
    if (missingOk && (e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new InternalError(frozen ? 'a server cgroup could not be frozen' : 'a server cgroup could not be thawed', { file }, { cause: e });
  }
}

/** Freezes every task of the cgroup; resolves once all are frozen. A freeze that does not
 *  complete in time is undone and throws (the server keeps running). */
export async function freeze(path: string): Promise<void> {
  write(path, true);
  const deadline = Date.now() + FREEZE_LIMIT_MS;
  for (let wait = 0; !isFrozen(path); wait = Math.min(20, wait + 1)) {
    if (Date.now() > deadline) {
      write(path, false);
      throw new InternalError('a server cgroup did not freeze in time', { path, ms: FREEZE_LIMIT_MS });
    }
    if (!V2) write(path, true); // v1: a FREEZING cgroup is pushed on by writing FROZEN again
    await sleep(wait);
  }
}

/** Undoes a freeze a crash cut short (asked for, not complete: some tasks frozen, some not), so a
 *  server is either frozen whole (a doze, kept across a restart) or running. */
export function settle(path: string): void {
  try {
    const asked = readFileSync(control(path), 'utf8').trim();
    if ((V2 ? asked === '1' : asked === 'FREEZING') && !isFrozen(path)) write(path, false);
  } catch {
    // no such cgroup: nothing was frozen
  }
}

/** Thaws the cgroup (nothing to do when it is not frozen or does not exist). */
export function thaw(path: string): void {
  write(path, false, true);
}
