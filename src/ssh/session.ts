// One SSH session channel: pty-req, env, window-change and signal requests, then exactly one of
// shell / exec / subsystem sftp, run inside the container through the runtime (a PTY under
// node-pty when the client asked for one, binary-safe pipes otherwise). Exit status or signal
// goes back to the client after all output. Closing the channel or losing the connection while
// the command still runs hangs up its whole process group inside the container (SIGHUP, then,
// if the top process is still there after a grace period, SIGKILL to every process the command
// started: its own cgroup, signalled from the host). Each running command is a
// `runc exec` on the host, so commands are counted (per connection and per server, see
// server.ts); one over a limit gets a line on stderr saying why and exit status 1. A command's
// slot is freed when its process exits.

import { randomBytes } from 'node:crypto';
import type { ServerChannel, Session } from 'ssh2';
import { AppError, errorFields, publicDetail } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { ExecOptions, ExitInfo, PipeProcess, PtyProcess, Runtime } from '../runtime/index.js';
import { acceptEnv, execCommand, sftpCommand, shellCommand, type SessionEnv } from './commands.js';
import type { Target } from './target.js';

export interface SessionDeps {
  target: Target;
  runtime?: Runtime;
  connection: SessionEnv['connection'];
  log: Logger;
  /** Registers a cleanup run when the whole connection goes away; returns an unregister function. */
  onConnectionClose(fn: () => void): () => void;
  /** A slot for one more command (shell, exec, sftp): its release function, or why there is none. */
  takeExec(): (() => void) | string;
  killGraceMs?: number;
}

type Accept<T = void> = (() => T) | undefined;
type Reject = (() => void) | undefined;

/** Signals a client may send (RFC 4254 §6.10). */
const SIGNALS = new Set(['ABRT', 'ALRM', 'FPE', 'HUP', 'ILL', 'INT', 'KILL', 'PIPE', 'QUIT', 'SEGV', 'TERM', 'USR1', 'USR2']);

const safeTerm = (t: string) => (/^[A-Za-z0-9._+-]{1,64}$/.test(t) ? t : 'xterm');
const dim = (n: number, d: number) => (Number.isInteger(n) && n > 0 ? Math.min(n, 10_000) : d);

/** Resolves once everything written to `w` before now has been handed to the transport. */
function flushed(w: NodeJS.WritableStream & { writableLength?: number }): Promise<void> {
  return new Promise((resolve) => {
    if (!(w as { writable?: boolean }).writable) return resolve();
    w.write(Buffer.alloc(0), () => resolve());
  });
}

function ended(r: NodeJS.ReadableStream & { readableEnded?: boolean }): Promise<void> {
  return new Promise((resolve) => {
    if (r.readableEnded) return resolve();
    r.once('end', resolve);
    r.once('close', resolve);
    r.once('error', resolve);
  });
}

export function serveSession(session: Session, deps: SessionDeps): void {
  const { target, log } = deps;
  const grace = deps.killGraceMs ?? 3000;
  let pty: { cols: number; rows: number; term: string } | undefined;
  const clientEnv: Record<string, string> = {};
  let started = false;
  let closed = false;
  let pipe: PipeProcess | undefined;
  let term: PtyProcess | undefined;
  let exited = false;
  let release: (() => void) | undefined = target.hold();
  /** This session's command slot, held until its process exits (or it never starts one). */
  let slot: (() => void) | undefined;
  const freeSlot = () => {
    slot?.();
    slot = undefined;
  };
  const token = randomBytes(12).toString('hex');

  /** HUP: the session's process group; KILL: every process the session's command started (from
   *  the host, see the runtime's signalAll). */
  const killGroup = async (sig: 'HUP' | 'KILL') => {
    try {
      await (term ?? pipe)?.signalAll(sig);
    } catch (e) {
      log.warn('ssh session kill failed', { server: target.id, err: e });
    }
  };

  const kill = (sig: NodeJS.Signals) => {
    try {
      (term ?? pipe)?.kill(sig);
    } catch (e) {
      log.debug('ssh kill failed', { err: e });
    }
  };
  const terminate = () => {
    if (closed) return;
    closed = true;
    unregister();
    release?.();
    release = undefined;
    if (!term && !pipe) freeSlot();
    if (pipe) {
      // Close our ends like sshd does: a writer left behind gets EPIPE instead of blocking on a
      // pipe nobody reads (the channel is gone, so ssh2 would never consume it).
      pipe.stdout.unpipe();
      pipe.stdout.destroy();
      pipe.stderr.destroy();
      pipe.stdin.destroy();
    }
    if ((term || pipe) && !exited) {
      // Not through runc's forwarding: it reaches only the top process, and once that is gone
      // its children can no longer be found as its group.
      void killGroup('HUP');
      const t = setTimeout(() => {
        if (exited) return;
        void killGroup('KILL').then(() => {
          if (!exited) kill('SIGKILL');
        });
      }, grace);
      t.unref();
    }
  };
  const unregister = deps.onConnectionClose(terminate);
  session.on('close', terminate);

  session.on('pty', (accept: Accept, reject: Reject, info) => {
    if (started) return reject?.();
    pty = { cols: dim(info.cols, 80), rows: dim(info.rows, 24), term: safeTerm(info.term) };
    accept?.();
  });
  session.on('env', (accept: Accept, reject: Reject, info) => {
    if (started || !acceptEnv(info.key, info.val)) return reject?.();
    clientEnv[info.key] = info.val;
    accept?.();
  });
  session.on('window-change', (accept: Accept, reject: Reject, info) => {
    if (!pty) return reject?.();
    pty = { ...pty, cols: dim(info.cols, pty.cols), rows: dim(info.rows, pty.rows) };
    term?.resize(pty.cols, pty.rows);
    accept?.();
  });
  session.on('signal', (accept: Accept, reject: Reject, info) => {
    const name = String(info.name).replace(/^SIG/, '');
    if (!SIGNALS.has(name) || !(term || pipe) || exited) return reject?.();
    kill(`SIG${name}` as NodeJS.Signals);
    accept?.();
  });
  session.on('auth-agent', (_a: Accept, reject: Reject) => reject?.());
  session.on('x11', (_a: Accept, reject: Reject) => reject?.());

  const begin = (accept: Accept<ServerChannel>, reject: Reject, build: (e: SessionEnv) => ExecOptions, usePty: boolean, what: string) => {
    if (started || closed || !accept) return reject?.();
    started = true;
    const channel = accept();
    if (!channel) return;
    channel.on('error', (e: Error) => log.debug('ssh channel error', { server: target.id, err: e }));
    const taken = deps.takeExec();
    if (typeof taken === 'string') {
      log.info('ssh command refused', { server: target.id, what, why: taken });
      return refuse(channel, taken);
    }
    slot = taken;
    run(channel, build, usePty && pty !== undefined, what).catch((e) => {
      log.error('ssh session failed', { server: target.id, what, err: e });
      refuse(channel, 'internal error starting the session');
    });
  };

  session.on('shell', (accept: Accept<ServerChannel>, reject: Reject) => begin(accept, reject, shellCommand, true, 'shell'));
  session.on('exec', (accept: Accept<ServerChannel>, reject: Reject, info) => {
    const command = String(info.command);
    begin(accept, reject, (e) => execCommand(command, e), true, 'exec');
  });
  session.on('subsystem', (accept: Accept<ServerChannel>, reject: Reject, info) => {
    if (info.name !== 'sftp') return reject?.();
    begin(accept, reject, sftpCommand, false, 'sftp');
  });

  function refuse(channel: ServerChannel, message: string): void {
    freeSlot();
    if (closed) return;
    channel.stderr.write(`rootbox: ${message}\r\n`);
    channel.exit(1);
    channel.end();
  }

  async function finish(channel: ServerChannel, info: ExitInfo): Promise<void> {
    exited = true;
    freeSlot();
    if (closed) return;
    await flushed(channel.stderr);
    await flushed(channel);
    if (closed) return;
    if (info.signal) channel.exit(info.signal.replace(/^SIG/, ''), !!info.coreDumped, '');
    else channel.exit(info.code ?? 255);
    channel.end();
  }

  async function run(channel: ServerChannel, build: (e: SessionEnv) => ExecOptions, withPty: boolean, what: string): Promise<void> {
    const refusal = target.refusal();
    if (refusal) return refuse(channel, refusal);
    if (!deps.runtime) return refuse(channel, 'servers cannot be reached on this host right now (container runtime not running)');
    try {
      await target.ready();
    } catch (e) {
      if (!(e instanceof AppError)) log.error('ssh: server could not be made ready', { server: target.id, err: errorFields(e) });
      return refuse(channel, publicDetail(e));
    }
    if (closed) return;
    const opts = build({ connection: deps.connection, client: clientEnv, term: withPty ? pty?.term : undefined, token });
    log.info('ssh session', { server: target.id, what, pty: withPty });
    if (withPty && pty) {
      const p = deps.runtime.execPty(target.id, { ...opts, cols: pty.cols, rows: pty.rows, term: pty.term });
      term = p;
      // Flow control both ways. Output: when the client stops reading (its SSH window is used
      // up, the channel's buffer passes its high-water mark) the terminal is no longer read, so
      // the program blocks on its next write until the client catches up. Input: while the
      // terminal's input queue is long the channel is paused; ssh2 then stops granting window,
      // so a client that floods keystrokes is held back instead of buffered here.
      channel.on('drain', () => p.resume());
      p.onData((d) => {
        if (closed) return;
        if (!channel.write(d)) p.pause();
      });
      p.onDrain(() => channel.resume());
      channel.on('data', (d: Buffer) => {
        if (!exited && !p.write(d)) channel.pause();
      });
      return finish(channel, await p.exited);
    }
    const p = deps.runtime.exec(target.id, opts);
    pipe = p;
    p.stdin.on('error', () => {}); // EPIPE when the process exits before reading all input
    channel.pipe(p.stdin);
    p.stdout.pipe(channel, { end: false });
    p.stderr.pipe(channel.stderr, { end: false });
    const [info] = await Promise.all([p.exited, ended(p.stdout), ended(p.stderr)]);
    return finish(channel, info);
  }
}
