// Commands run in a running server (runc exec): with pipes (exec) or a pty (execPty), wrapped by
// the rbx-exec wrapper when it was built (execwrap.ts: exit reports) — the process side is
// exec.ts. Each runs in its own cgroup under the server's (execgroup.ts), so signalAll('KILL')
// ends everything it started from the host. The runtime (runtime.ts) checks first that the
// server is running.

import { basename } from 'node:path';
import { AppError } from '../errors.js';
import { pipeExec, ptyExec, type Wrapping } from './exec.js';
import { ExecGroup } from './execgroup.js';
import type { Runc } from './runc.js';
import { INIT_MOUNT } from './supervisor.js';
import type { ExecOptions, ExitInfo, PipeProcess, PtyOptions, PtyProcess } from './types.js';

/** The wrapper (exit reports, see execwrap.ts) when it was built (`host`: its host path). */
function wrapping(host: string | undefined): Wrapping | undefined {
  return host ? { host, inside: `${INIT_MOUNT}/${basename(host)}` } : undefined;
}

/** signalAll for a process in `group` (runc's own signal when there is none); the group is
 *  released once the process has ended. */
function signalling(
  group: ExecGroup | undefined,
  wrapped: boolean,
  p: { exited: Promise<ExitInfo>; kill(signal?: NodeJS.Signals): void },
): (sig: 'HUP' | 'TERM' | 'KILL') => Promise<void> {
  if (!group) return async (sig) => p.kill(`SIG${sig}`);
  let ended = false;
  void p.exited.then(() => {
    ended = true;
    return group.release();
  });
  return async (sig) => {
    if (ended) return;
    if (sig !== 'KILL') return group.signal(`SIG${sig}`);
    await group.kill(wrapped);
  };
}

export function execIn(runc: Runc, id: string, cgroup: string, opts: ExecOptions, execWrapper: string | undefined): PipeProcess {
  if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
  const w = wrapping(execWrapper);
  const argv = w ? [w.inside, 'run', ...opts.argv] : opts.argv;
  const group = ExecGroup.open(cgroup);
  const p = pipeExec(runc.execArgs(id, { tty: false, argv, env: opts.env, cwd: opts.cwd, preserveFds: w ? 1 : 0, cgroup: group?.runcFlag }), !!w);
  return { ...p, signalAll: signalling(group, !!w, p) };
}

export function execPtyIn(runc: Runc, id: string, cgroup: string, opts: PtyOptions, execWrapper: string | undefined): PtyProcess {
  if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
  const env = { TERM: opts.term, ...opts.env };
  const w = wrapping(execWrapper);
  const argv = w ? [w.inside, 'run', ...opts.argv] : opts.argv;
  const group = ExecGroup.open(cgroup);
  let p: Omit<PtyProcess, 'signalAll'>;
  try {
    p = ptyExec(runc.execArgs(id, { tty: true, argv, env, cwd: opts.cwd, preserveFds: w ? 1 : 0, cgroup: group?.runcFlag }), opts, w);
  } catch (e) {
    void group?.release();
    throw e;
  }
  return { ...p, signalAll: signalling(group, !!w, p) };
}
