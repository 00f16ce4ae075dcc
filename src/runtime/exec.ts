// Processes inside a running server, always through `runc exec` so they join the container's
// namespaces, cgroup, seccomp filter, capability set and no_new_privs (never nsenter):
//   pipeExec  binary-safe stdin/stdout/stderr pipes; exit status of the process;
//   ptyExec   `runc exec -t` on a node-pty pseudo-terminal; resize forwards the window size;
//             output can be paused (back-pressure towards the program) and input is queued
//             with a bound the caller sees (write() returns false, onDrain() when it may go on).
// With the rbx-exec wrapper (execwrap.ts) the exit report travels on fd 3 of `runc exec`: a pipe
// for pipeExec, and for ptyExec a connection to an abstract unix socket of this process that
// the wrapper's host-side relay mode opens. Without a report the exit comes from runc alone.

import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { write as fsWrite } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer, type Server, type Socket } from 'node:net';
import { constants } from 'node:os';
import type { ExitInfo, PipeProcess, PtyProcess } from './types.js';

type NodePty = typeof import('node-pty');
let ptyModule: NodePty | undefined;
const loadPty = (): NodePty => (ptyModule ??= createRequire(import.meta.url)('node-pty') as NodePty);

/** Terminal input queued for a PTY before write() asks the caller to wait. */
const PTY_INPUT_HIGH = 64 * 1024;
/** Retry delay when the terminal's input buffer is full (EAGAIN). */
const PTY_RETRY_MS = 10;
const REPORT_MAX = 256;

const signalName = (n: number | undefined): string | null => {
  if (!n) return null;
  return (Object.entries(constants.signals).find(([, v]) => v === n)?.[0] as string | undefined) ?? `SIG${n}`;
};

/** The wrapper's report ("exit N" / "signal N [core]") turned into ExitInfo; null if absent. */
export function parseReport(text: string): ExitInfo | null {
  const m = /^(exit|signal) (\d{1,3})( core)?$/m.exec(text);
  if (!m) return null;
  const n = Number(m[2]);
  if (m[1] === 'exit') return n <= 255 ? { code: n, signal: null } : null;
  return n >= 1 && n < 65 ? { code: null, signal: signalName(n), coreDumped: !!m[3] } : null;
}

/** Reads a report stream to its end (bounded); resolves with what it said. */
function readReport(s: NodeJS.ReadableStream): Promise<ExitInfo | null> {
  return new Promise((resolve) => {
    let text = '';
    s.on('data', (b: Buffer) => {
      if (text.length < REPORT_MAX) text += b.toString('latin1').slice(0, REPORT_MAX - text.length);
    });
    const done = () => resolve(parseReport(text));
    s.once('end', done);
    s.once('close', done);
    s.once('error', done);
  });
}

/** How an exec is wrapped: the wrapper inside the container and, for PTYs, on the host. */
export interface Wrapping {
  /** Path of rbx-exec inside the container. */
  inside: string;
  /** Path of the same binary on the host (relay mode for PTY execs). */
  host: string;
}

export function pipeExec(argv: string[], wrapped: boolean): Omit<PipeProcess, 'signalAll'> {
  const child = spawn('runc', argv, { stdio: ['pipe', 'pipe', 'pipe', wrapped ? 'pipe' : 'ignore'] }) as ChildProcessByStdio<Writable, Readable, Readable>;
  const fd3 = (child.stdio as unknown[])[3] as Readable | null;
  const report = fd3 ? readReport(fd3) : Promise.resolve(null);
  const exited = new Promise<ExitInfo>((resolve) => {
    child.on('error', () => resolve({ code: 255, signal: null }));
    child.on('close', (code, signal) => void report.then((r) => resolve((!signal && r) || { code, signal })));
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

/** One abstract unix socket per daemon where relayed PTY execs deliver their reports. */
class ReportServer {
  readonly name = `rootbox-exec-${process.pid}-${randomBytes(6).toString('hex')}`;
  private readonly waiting = new Map<string, (s: Socket) => void>();
  private server: Server | undefined;

  private listen(): void {
    if (this.server) return;
    this.server = createServer((sock) => {
      let head = '';
      const onData = (b: Buffer) => {
        head += b.toString('latin1');
        const nl = head.indexOf('\n');
        if (nl < 0) {
          if (head.length > 64) sock.destroy();
          return;
        }
        sock.off('data', onData);
        const take = this.waiting.get(head.slice(0, nl));
        if (!take) return void sock.destroy();
        this.waiting.delete(head.slice(0, nl));
        sock.pause();
        take(sock);
        if (nl + 1 < head.length) sock.unshift(Buffer.from(head.slice(nl + 1), 'latin1'));
        sock.resume();
      };
      sock.on('data', onData);
      sock.on('error', () => {});
    });
    this.server.on('error', () => {});
    this.server.listen(`\0${this.name}`);
    this.server.unref();
  }

  /** A token for the relay and the connection that will carry its report. */
  expect(): { token: string; socket: Promise<Socket>; cancel(): void } {
    this.listen();
    const token = randomBytes(16).toString('hex');
    let cancel = () => {};
    const socket = new Promise<Socket>((resolve) => {
      this.waiting.set(token, resolve);
      cancel = () => this.waiting.delete(token);
    });
    return { token, socket, cancel };
  }
}

let reports: ReportServer | undefined;

/** How long after the terminal's process ended a report may still arrive. */
const REPORT_GRACE_MS = 1000;

export function ptyExec(argv: string[], o: { cols: number; rows: number; term: string }, wrap?: Wrapping): Omit<PtyProcess, 'signalAll'> {
  const expect = wrap ? (reports ??= new ReportServer()).expect() : undefined;
  const [file, args] = wrap && expect ? [wrap.host, ['relay', reports!.name, expect.token, 'runc', ...argv]] : ['runc', argv];
  let pty: import('node-pty').IPty;
  try {
    pty = loadPty().spawn(file, args, {
      name: o.term,
      cols: Math.max(1, Math.min(1000, o.cols | 0)),
      rows: Math.max(1, Math.min(1000, o.rows | 0)),
      cwd: '/',
      env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', TERM: o.term },
      encoding: null,
    });
  } catch (e) {
    expect?.cancel();
    throw e;
  }
  const fd = (pty as unknown as { fd: number }).fd;
  // Input: node-pty's own writer retries EAGAIN on every event-loop turn (a busy loop while a
  // program does not read its terminal) and queues without bound. This one retries on a timer
  // and tells the caller when the queue is long.
  const queue: Buffer[] = [];
  let queued = 0;
  let writing = false;
  let wantDrain = false;
  const drains: (() => void)[] = [];
  let done = false;
  /** runc has exited: nothing more will be read by the program, and output must not stay paused
   *  (node-pty drops the terminal 200 ms after its process ends, unread output with it). */
  let gone = false;
  const runcGone = () => {
    gone = true;
    queue.length = 0;
    queued = 0;
    pty.resume();
    if (wantDrain) {
      wantDrain = false;
      for (const fn of drains) fn();
    }
  };
  let report: Promise<ExitInfo | null> = Promise.resolve(null);
  if (expect) {
    report = expect.socket.then((s) => {
      s.once('end', runcGone);
      s.once('close', runcGone);
      return readReport(s);
    });
  }
  const exited = new Promise<ExitInfo>((resolve) => {
    pty.onExit(({ exitCode, signal }) => {
      done = true;
      runcGone();
      const own: ExitInfo = { code: signal ? null : exitCode, signal: signalName(signal) };
      let t: NodeJS.Timeout | undefined;
      const late = new Promise<null>((r) => (t = setTimeout(() => r(null), REPORT_GRACE_MS)));
      void Promise.race([report, late]).then((r) => {
        clearTimeout(t);
        expect?.cancel();
        resolve((!own.signal && r) || own);
      });
    });
  });

  const pump = () => {
    if (writing || done || gone || !queue.length) return;
    writing = true;
    fsWrite(fd, queue[0], 0, queue[0].length, null, (err, n) => {
      writing = false;
      if (done || gone) return;
      if (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') setTimeout(pump, PTY_RETRY_MS);
        else runcGone();
        return;
      }
      queued -= n;
      if (n >= queue[0].length) queue.shift();
      else queue[0] = queue[0].subarray(n);
      if (wantDrain && queued < PTY_INPUT_HIGH / 2) {
        wantDrain = false;
        for (const fn of drains) fn();
      }
      pump();
    });
  };

  return {
    onData: (fn) => {
      pty.onData((d) => fn(typeof d === 'string' ? Buffer.from(d, 'utf8') : Buffer.from(d as unknown as Uint8Array)));
    },
    write: (data) => {
      if (done || gone) return true;
      const b = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
      if (b.length) {
        queue.push(b);
        queued += b.length;
        pump();
      }
      if (queued < PTY_INPUT_HIGH) return true;
      wantDrain = true;
      return false;
    },
    onDrain: (fn) => void drains.push(fn),
    pause: () => {
      if (!gone) pty.pause();
    },
    resume: () => pty.resume(),
    resize: (cols, rows) => {
      if (!done) pty.resize(Math.max(1, Math.min(1000, cols | 0)), Math.max(1, Math.min(1000, rows | 0)));
    },
    exited,
    kill: (signal = 'SIGHUP') => {
      if (!done) pty.kill(signal);
    },
  };
}
