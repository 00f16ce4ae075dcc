// Processes inside a running server, always through `runc exec` so they join the container's
// namespaces, cgroup, seccomp filter, capability set and no_new_privs (never nsenter):
//   pipeExec  binary-safe stdin/stdout/stderr pipes; exit status of the process;
//   ptyExec   `runc exec -t` on a node-pty pseudo-terminal; resize forwards the window size.

import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import type { ExitInfo, PipeProcess, PtyProcess } from './types.js';

type NodePty = typeof import('node-pty');
let ptyModule: NodePty | undefined;
const loadPty = (): NodePty => (ptyModule ??= createRequire(import.meta.url)('node-pty') as NodePty);

const signalName = (n: number | undefined): string | null => {
  if (!n) return null;
  return (Object.entries(constants.signals).find(([, v]) => v === n)?.[0] as string | undefined) ?? `SIG${n}`;
};

export function pipeExec(argv: string[]): PipeProcess {
  const child = spawn('runc', argv, { stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise<ExitInfo>((resolve) => {
    child.on('error', () => resolve({ code: 255, signal: null }));
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  // A client closing stdin early must not crash the daemon with EPIPE.
  child.stdin.on('error', () => {});
  return {
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    kill: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
  };
}

export function ptyExec(argv: string[], o: { cols: number; rows: number; term: string }): PtyProcess {
  const pty = loadPty().spawn('runc', argv, {
    name: o.term,
    cols: Math.max(1, Math.min(1000, o.cols | 0)),
    rows: Math.max(1, Math.min(1000, o.rows | 0)),
    cwd: '/',
    env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', TERM: o.term },
    encoding: null,
  });
  let done = false;
  const exited = new Promise<ExitInfo>((resolve) => {
    pty.onExit(({ exitCode, signal }) => {
      done = true;
      resolve({ code: signal ? null : exitCode, signal: signalName(signal) });
    });
  });
  return {
    onData: (fn) => {
      pty.onData((d) => fn(typeof d === 'string' ? Buffer.from(d, 'utf8') : Buffer.from(d as unknown as Uint8Array)));
    },
    write: (data) => {
      if (!done) pty.write(data as string);
    },
    resize: (cols, rows) => {
      if (!done) pty.resize(Math.max(1, Math.min(1000, cols | 0)), Math.max(1, Math.min(1000, rows | 0)));
    },
    exited,
    kill: (signal = 'SIGHUP') => {
      if (!done) pty.kill(signal);
    },
  };
}
