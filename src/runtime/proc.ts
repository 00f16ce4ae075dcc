// Running host tools (runc, ip, nft, mount, losetup, mkfs…): one promise per command with a
// typed failure carrying the exit code and stderr (like go-runc), an optional stdin and a
// time limit. Every child process of the daemon starts here or in exec.ts.

import { spawn } from 'node:child_process';
import { AppError } from '../errors.js';

export interface RunOptions {
  input?: string | Buffer;
  timeoutMs?: number;
  /** Exit codes treated as success (default [0]). */
  okCodes?: number[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** /dev/null for stdout and stderr: for commands whose children outlive them (runc create),
   *  which would otherwise hold our pipes open forever. */
  detachedStdio?: boolean;
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export class CommandError extends AppError {
  constructor(
    readonly command: string,
    readonly exitCode: number | null,
    readonly stderr: string,
  ) {
    super('internal', 'runtime_command_failed', `${command} failed (exit ${exitCode ?? 'signal'}): ${stderr.trim().slice(0, 500)}`);
  }
}

export function run(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      stdio: opts.detachedStdio ? 'ignore' : [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      env: opts.env ?? process.env,
      cwd: opts.cwd,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (d: Buffer) => out.push(d));
    child.stderr?.on('data', (d: Buffer) => err.push(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new CommandError(`${cmd} ${args.join(' ')}`, null, e.message));
    });
    child.on(opts.detachedStdio ? 'exit' : 'close', (code, signal) => {
      clearTimeout(timer);
      const res = { code: code ?? -1, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') };
      if (code !== null && (opts.okCodes ?? [0]).includes(code)) resolve(res);
      else reject(new CommandError(`${cmd} ${args.join(' ')}`, code, res.stderr || (signal ? `killed by ${signal}` : res.stdout)));
    });
    if (opts.input !== undefined) child.stdin!.end(opts.input);
  });
}

/** Like run(), but never rejects: for cleanup steps where "already gone" is fine. */
export async function tryRun(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult | null> {
  try {
    return await run(cmd, args, opts);
  } catch {
    return null;
  }
}
