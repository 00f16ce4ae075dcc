// Commands run in a running server (runc exec): with pipes (exec) or a pty (execPty), wrapped by
// the rbx-exec wrapper when it was built (execwrap.ts: exit reports) — the process side is
// exec.ts. The runtime (runtime.ts) checks first that the server is running.

import { basename } from 'node:path';
import { AppError } from '../errors.js';
import { pipeExec, ptyExec, type Wrapping } from './exec.js';
import type { Runc } from './runc.js';
import { INIT_MOUNT } from './supervisor.js';
import type { ExecOptions, PipeProcess, PtyOptions, PtyProcess } from './types.js';

/** The wrapper (exit reports, see execwrap.ts) when it was built (`host`: its host path). */
function wrapping(host: string | undefined): Wrapping | undefined {
  return host ? { host, inside: `${INIT_MOUNT}/${basename(host)}` } : undefined;
}

export function execIn(runc: Runc, id: string, opts: ExecOptions, execWrapper: string | undefined): PipeProcess {
  if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
  const w = wrapping(execWrapper);
  const argv = w ? [w.inside, 'run', ...opts.argv] : opts.argv;
  return pipeExec(runc.execArgs(id, { tty: false, argv, env: opts.env, cwd: opts.cwd, preserveFds: w ? 1 : 0 }), !!w);
}

export function execPtyIn(runc: Runc, id: string, opts: PtyOptions, execWrapper: string | undefined): PtyProcess {
  if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
  const env = { TERM: opts.term, ...opts.env };
  const w = wrapping(execWrapper);
  const argv = w ? [w.inside, 'run', ...opts.argv] : opts.argv;
  return ptyExec(runc.execArgs(id, { tty: true, argv, env, cwd: opts.cwd, preserveFds: w ? 1 : 0 }), opts, w);
}
