// Commands run in a customer's server for the HTTP API (exec and the file operations): each is a
// `runc exec` exactly like an SSH exec (the runtime's pipeExec: the container's namespaces,
// cgroup, seccomp filter, capabilities, no_new_privs). Before it starts: the server must not be
// suspended, a slot is taken from the account's budget and from the server's (shared with SSH
// through `serverSlot`; 429 too_many_commands beyond), the server is held awake (presence hold)
// and woken or thawed. While it runs a deadline is kept; at the deadline, or when abort() is
// called (the client left), the command's process group gets TERM and, after killGrace, every
// process the command started is killed (from the host: the runtime's signalAll, which needs no
// fork inside a server whose pids are all taken). Slots and hold are given back when the process
// has exited.

import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { AppError, errorFields, isAppError } from '../errors.js';
import type { Req, Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { Presence } from '../presence/index.js';
import type { ExecOptions, ExitInfo, PipeProcess, Runtime } from '../runtime/index.js';
import type { AccountRecord, ServerRecord } from '../store/index.js';
import type { SharedQuotas } from './quotas.js';

export const EXEC_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface CommandsDeps {
  runtime: Runtime;
  presence: Presence;
  log: Logger;
  /** Fresh record lookup (a suspension made a moment ago applies). */
  current(id: string): ServerRecord | undefined;
  /** A slot of the server's command budget (SSH's, see SshServer.takeServerSlot), or why none. */
  serverSlot(id: string): (() => void) | string;
  maxPerAccount: number;
  /** Cluster mode: the per-account cap counted across hosts (a reservation per running command). */
  shared?: Pick<SharedQuotas, 'reserveExec' | 'releaseExec'>;
  killGraceMs: number;
}

export interface Finished {
  info: ExitInfo;
  timedOut: boolean;
  ms: number;
}

/** A command that runs: its pipes, its end, and a way to end it early (with its process group). */
export interface Running {
  proc: PipeProcess;
  finished: Promise<Finished>;
  abort(): void;
}

export class Commands {
  private readonly perAccount = new Map<string, number>();

  constructor(private readonly d: CommandsDeps) {}

  /** Starts `opts` in the server (see the header); throws an AppError when it may not run now. */
  async start(account: AccountRecord, rec: ServerRecord, opts: ExecOptions, timeoutMs: number): Promise<Running> {
    const now = this.d.current(rec.id);
    if (!now) throw AppError.of('server_not_found', `you have no server ${rec.id}`);
    if (now.suspended)
      throw AppError.of(
        'suspended',
        `server ${now.slug} is suspended: the free grant is used up and there is no credit; add credit or verify a phone number to resume it`,
      );
    const releases: (() => void)[] = [];
    const releaseAll = () => {
      for (const r of releases.splice(0)) r();
    };
    const max = this.d.maxPerAccount;
    const held = this.perAccount.get(account.id) ?? 0;
    const tooMany = () => AppError.of('too_many_commands', `your servers run ${max} commands at once, the limit of an account (${max}); wait for one to end`);
    if (held >= max) throw tooMany();
    this.perAccount.set(account.id, held + 1);
    releases.push(() => {
      const n = (this.perAccount.get(account.id) ?? 1) - 1;
      if (n > 0) this.perAccount.set(account.id, n);
      else this.perAccount.delete(account.id);
    });
    if (this.d.shared) {
      const shared = this.d.shared;
      const execId = `exe_${randomBytes(9).toString('hex')}`;
      let reserved: boolean;
      try {
        // every host's commands of the account, checked and reserved at once; expires after the
        // command's deadline should this host die with it
        reserved = await shared.reserveExec(account.id, execId, max, timeoutMs + this.d.killGraceMs + 60_000);
      } catch (e) {
        if (!isAppError(e) || e.code !== 'registry_unavailable') {
          releaseAll();
          throw e;
        }
        reserved = true; // the registry is away: this host's own count still holds
        this.d.log.warn('exec: the registry is away; commands counted on this host alone', { account: account.id });
      }
      if (!reserved) {
        releaseAll();
        throw tooMany();
      }
      releases.push(
        () => void shared.releaseExec(execId).catch((err) => this.d.log.warn('exec: a reservation stays until it expires', { execId, err: errorFields(err) })),
      );
    }
    const slot = this.d.serverSlot(rec.id);
    if (typeof slot === 'string') {
      releaseAll();
      throw AppError.of('too_many_commands', slot);
    }
    releases.push(slot, this.d.presence.hold(rec.id));
    let proc: PipeProcess;
    try {
      await this.d.presence.wake(rec.id);
      const rs = this.d.runtime.get(rec.id);
      if (!rs) throw AppError.of('server_not_found', `server ${rec.id} is not known to the container runtime`);
      if (rs.state !== 'running') throw AppError.of('server_not_ready', `server ${rec.slug} is ${rs.state}; try again in a moment`);
      proc = this.d.runtime.exec(rec.id, opts);
    } catch (e) {
      releaseAll();
      throw e;
    }
    const started = performance.now();
    let exited = false;
    let timedOut = false;
    let killing = false;
    const killGroup = async () => {
      if (killing || exited) return;
      killing = true;
      await this.signal(rec.id, proc, 'TERM');
      const t = setTimeout(() => {
        if (exited) return;
        void this.signal(rec.id, proc, 'KILL').then(() => {
          if (!exited) proc.kill('SIGKILL');
        });
      }, this.d.killGraceMs);
      t.unref();
    };
    const deadline = setTimeout(() => {
      timedOut = true;
      void killGroup();
    }, timeoutMs);
    const finished = proc.exited.then((info) => {
      exited = true;
      clearTimeout(deadline);
      this.d.presence.touch(rec.id);
      releaseAll();
      return { info, timedOut, ms: Math.round(performance.now() - started) };
    });
    return { proc, finished, abort: () => void killGroup() };
  }

  /** TERM: the command's process group; KILL: everything the command started. */
  private async signal(id: string, proc: PipeProcess, sig: 'TERM' | 'KILL'): Promise<void> {
    try {
      await proc.signalAll(sig);
    } catch (e) {
      this.d.log.warn('exec: signalling the command failed', { server: id, err: errorFields(e) });
    }
  }
}

/** Reads a stream to its end keeping at most `max` bytes; `cut` says whether more came. */
export function collect(s: NodeJS.ReadableStream, max: number): Promise<{ data: Buffer; cut: boolean }> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let size = 0;
    let cut = false;
    s.on('data', (b: Buffer) => {
      if (size >= max) return void (cut = true);
      const take = b.length > max - size ? b.subarray(0, max - size) : b;
      if (take.length < b.length) cut = true;
      parts.push(take);
      size += take.length;
    });
    const done = () => resolve({ data: Buffer.concat(parts, size), cut });
    s.once('end', done);
    s.once('close', done);
    s.once('error', done);
  });
}

/** Calls `fn` once when the client goes away before the answer is finished: the response closes
 *  or, over HTTP/1.1, the client ends its side of the connection (the edge's sockets allow half
 *  open, so a client that leaves is not noticed until something is written otherwise). */
export function whenClientLeaves(req: Req, res: Res, fn: () => void): void {
  const socket = req.httpVersionMajor === 1 ? (req.socket as Socket | null) : null;
  let called = false;
  const gone = () => {
    if (called || res.writableFinished) return;
    called = true;
    fn();
  };
  const off = () => {
    socket?.off('end', gone);
    socket?.off('close', gone);
  };
  res.once('close', gone);
  res.once('finish', off);
  socket?.once('end', gone);
  socket?.once('close', gone);
}
