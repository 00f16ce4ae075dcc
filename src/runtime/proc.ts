// Running host tools (runc, ip, nft, mount, losetup, mkfs…): one promise per command with a
// typed failure carrying the command, its arguments, exit code and stderr (like go-runc's
// ExitError), an optional stdin and a time limit. Every child process of the daemon starts here
// or in exec.ts. A CommandError is internal: it names host paths and quotes tool output, so it is
// logged and never shown to a client (see src/errors.ts).

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { InternalError } from '../errors.js';

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

const STDERR_KEPT = 4096;

/** A host command that failed: what ran, how it ended and what it said on stderr. */
export class CommandError extends InternalError {
  readonly command: string;
  readonly args: readonly string[];
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stderr: string;

  constructor(command: string, args: readonly string[], how: { exitCode: number | null; signal?: string | null; stderr: string }) {
    const stderr = how.stderr.trim().slice(-STDERR_KEPT);
    const ended = how.exitCode !== null ? `exit ${how.exitCode}` : how.signal ? `killed by ${how.signal}` : 'did not run';
    super(`${command} ${args.join(' ')} failed (${ended}): ${stderr.slice(0, 500)}`, {
      command,
      args: [...args],
      exit_code: how.exitCode,
      signal: how.signal ?? null,
      stderr,
    });
    this.name = 'CommandError';
    this.command = command;
    this.args = args;
    this.exitCode = how.exitCode;
    this.signal = how.signal ?? null;
    this.stderr = stderr;
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
      reject(new CommandError(cmd, args, { exitCode: null, stderr: e.message }));
    });
    child.on(opts.detachedStdio ? 'exit' : 'close', (code, signal) => {
      clearTimeout(timer);
      const res = { code: code ?? -1, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') };
      if (code !== null && (opts.okCodes ?? [0]).includes(code)) resolve(res);
      else reject(new CommandError(cmd, args, { exitCode: code, signal, stderr: res.stderr || res.stdout }));
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

/** A process kept alive while the caller works on it (a namespace holder, network.ts): started
 *  by `started()` once it echoes a byte back (so it runs the command, not the tool that set it
 *  up), ended by closing its stdin. A daemon that dies closes that stdin too, so it never
 *  outlives a killed daemon. */
export interface Holder {
  pid: number;
  started(timeoutMs?: number): Promise<void>;
  end(): Promise<void>;
}

export function holder(cmd: string, args: readonly string[]): Holder {
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const err: Buffer[] = [];
  child.stderr!.on('data', (d: Buffer) => err.push(d));
  child.stdin!.on('error', () => {}); // a holder that died: started() says so
  const failed = (why: string) =>
    new CommandError(cmd, args, { exitCode: child.exitCode, signal: child.signalCode, stderr: Buffer.concat(err).toString() || why });
  return {
    pid: child.pid ?? -1,
    started(timeoutMs = 10_000) {
      return new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(failed('did not start in time')), timeoutMs);
        child.stdout!.once('data', () => (clearTimeout(t), resolve()));
        child.once('error', (e) => (clearTimeout(t), reject(failed(e.message))));
        child.once('close', () => (clearTimeout(t), reject(failed('ended before it started'))));
        child.stdin!.write('.');
      });
    },
    async end() {
      child.stdin!.end();
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** True while the process exists and is not a zombie (an exited init waits for the host's PID 1
 *  to reap it, which some hosts do slowly; its container is gone already). */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}
