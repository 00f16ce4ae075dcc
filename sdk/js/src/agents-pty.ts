// The interactive processes of an OpenAI Agents SDK sandbox session (exec_command with tty: true,
// then write_stdin): each runs over the exec WebSocket (Server.spawn) inside `script`, so the
// command sees a real terminal allocated inside the server; its output is kept until a call
// reads it, and a call waits up to its yield time for more output or the exit. The window size
// is script's default (no resize over the exec socket).

import { elapsedSeconds, formatExecResponse, shellQuote, truncateOutput } from '@openai/agents-core/sandbox/internal';
import type { Process } from './process.js';
import type { Server } from './server.js';

const YIELD_MIN_MS = 250;
const YIELD_MAX_MS = 30_000;
const EMPTY_WRITE_YIELD_MIN_MS = 5_000; // polling without input waits at least this long
const MAX_PROCESSES = 64;

interface Entry {
  process: Process;
  output: string;
  closed: boolean;
  exitCode: number | null;
  lastUsed: number;
  wake: Set<() => void>;
}

const clamp = (ms: number) => Math.max(YIELD_MIN_MS, Math.min(YIELD_MAX_MS, ms));

/** The command line run on a terminal: `script` gives it a pty inside the server, the shell runs it. */
export function ptyCommand(cmd: string, shell?: string, login?: boolean): string {
  const sh = shell ?? '/bin/sh';
  const inner = `${sh} ${(shell ? (login ?? true) : false) ? '-lc' : '-c'} ${shellQuote(cmd)}`;
  return `exec script -qfec ${shellQuote(inner)} /dev/null`;
}

export class PtyProcesses {
  private readonly entries = new Map<number, Entry>();

  /** Starts a command on a terminal and answers what it printed within yieldTimeMs (and its
   *  session id while it runs). */
  async start(
    server: Server,
    cmd: string,
    o: { cwd: string; env: Record<string, string>; timeout?: number; yieldTimeMs?: number; maxOutputTokens?: number },
  ): Promise<string> {
    const started = Date.now();
    const entry: Entry = { process: undefined as unknown as Process, output: '', closed: false, exitCode: null, lastUsed: started, wake: new Set() };
    const notify = () => {
      for (const w of entry.wake) w();
    };
    entry.process = await server.spawn(cmd, {
      cwd: o.cwd,
      env: { TERM: 'xterm-256color', ...o.env },
      timeout: o.timeout,
      onStdout: (s) => ((entry.output += s), notify()),
      onStderr: (s) => ((entry.output += s), notify()),
    });
    entry.process.wait().then(
      (r) => ((entry.closed = true), (entry.exitCode = r.exitCode ?? (r.timedOut ? 124 : 1)), notify()),
      () => ((entry.closed = true), (entry.exitCode = 1), notify()),
    );
    if (this.entries.size >= MAX_PROCESSES) {
      const oldest = [...this.entries].sort((a, b) => a[1].lastUsed - b[1].lastUsed)[0];
      oldest[1].process.kill();
      this.entries.delete(oldest[0]);
    }
    let id: number;
    do id = 1000 + Math.floor(Math.random() * 99_000);
    while (this.entries.has(id));
    this.entries.set(id, entry);
    return this.collect(id, entry, started, clamp(o.yieldTimeMs ?? 10_000), o.maxOutputTokens);
  }

  /** Writes to a running session's terminal, then answers its new output. */
  async write(sessionId: number, chars = '', o: { yieldTimeMs?: number; maxOutputTokens?: number } = {}): Promise<string> {
    const entry = this.entries.get(sessionId);
    if (!entry) return formatExecResponse({ output: `write_stdin failed: session not found: ${sessionId}`, wallTimeSeconds: 0, exitCode: 1 });
    const started = Date.now();
    if (chars) await entry.process.write(chars);
    const wait = clamp(o.yieldTimeMs ?? 250);
    return this.collect(sessionId, entry, started, chars ? wait : Math.max(wait, EMPTY_WRITE_YIELD_MIN_MS), o.maxOutputTokens);
  }

  private async collect(id: number, entry: Entry, started: number, yieldMs: number, maxOutputTokens?: number): Promise<string> {
    const deadline = Date.now() + yieldMs;
    while (!entry.closed && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const done = () => (clearTimeout(t), entry.wake.delete(done), resolve());
        const t = setTimeout(done, deadline - Date.now());
        entry.wake.add(done);
      });
    }
    const output = entry.output;
    entry.output = '';
    entry.lastUsed = Date.now();
    const closed = entry.closed;
    if (closed) this.entries.delete(id);
    const t = truncateOutput(output, maxOutputTokens);
    return formatExecResponse({
      output: t.text,
      wallTimeSeconds: elapsedSeconds(started),
      sessionId: closed ? undefined : id,
      exitCode: closed ? entry.exitCode : undefined,
      originalTokenCount: t.originalTokenCount,
    });
  }

  /** Ends every session (their commands are killed with the socket). */
  terminateAll(): void {
    for (const e of this.entries.values()) e.process.kill();
    this.entries.clear();
  }
}
