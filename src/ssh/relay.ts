// A login on this host with the key of a server another host runs (cluster mode): this host
// authenticated the client itself and now relays the connection to the owner. One SSH client
// connection over a byte stream of the channel (the owner's SSH server takes it as already
// authenticated for that server, and wakes it as for a local login) carries every channel the
// user opens here: a session's pty-req and env (kept until it starts), shell, exec or subsystem
// sftp, then window-change and signal; its output, stderr, EOF, exit status or signal and close
// come back in that order. `-L` (direct-tcpip) opens the same channel on the owner. Data moves
// through stream pipes, so each side's SSH window is granted only as the other side takes the
// bytes (flow control end to end). The owner is asked once per connection, at login; when it
// is down or cannot be reached every channel gets a sentence saying so (a session on stderr with
// exit status 1, a forward in its open failure), never a hang. When the owner's connection
// ends, so does the user's.

import type { Duplex } from 'node:stream';
import ssh2 from 'ssh2';
import type { ClientChannel, Connection, PseudoTtyOptions, ServerChannel, Session, TcpipRequestInfo } from 'ssh2';
import { AppError, publicDetail } from '../errors.js';
import type { Logger } from '../log/index.js';
import { acceptEnv } from './commands.js';
import { rejectWithReason } from './forward.js';

export interface RelayDeps {
  /** A stream to the owner's SSH server, authenticated for the server (the channel); throws an AppError when there is none. */
  open(): Promise<Duplex>;
  serverId: string;
  ip: string;
  log: Logger;
  /** How long the SSH handshake with the owner may take. */
  readyTimeoutMs?: number;
}

type Accept<T = void> = (() => T) | undefined;
type Reject = (() => void) | undefined;

const CONNECT_FAILED = 2;
/** How long sessions may take to tell the user the owner's connection was lost before it is closed. */
const FAREWELL_MS = 2000;

/** Resolves once everything written to `w` before now has been handed on. */
function flushed(w: NodeJS.WritableStream): Promise<void> {
  return new Promise((resolve) => {
    if (!(w as { writable?: boolean }).writable) return resolve();
    w.write(Buffer.alloc(0), () => resolve());
  });
}

function ended(r: NodeJS.ReadableStream & { readableEnded?: boolean; destroyed?: boolean }): Promise<void> {
  return new Promise((resolve) => {
    if (r.readableEnded || r.destroyed) return resolve();
    r.once('end', resolve);
    r.once('close', resolve);
    r.once('error', resolve);
  });
}

export class Relay {
  private readonly upstream: Promise<ssh2.Client>;
  private closed = false;
  /** Sessions under way, each settled once its exit (or the sentence why there is none) went out. */
  private readonly sessions = new Set<Promise<void>>();

  constructor(
    private readonly client: Connection,
    private readonly d: RelayDeps,
  ) {
    this.upstream = this.connect();
    this.upstream.catch(() => {});
  }

  private async connect(): Promise<ssh2.Client> {
    const { log } = this.d;
    let sock: Duplex;
    try {
      sock = await this.d.open();
    } catch (e) {
      log.info('ssh relay: the owner cannot be reached', { server: this.d.serverId, ip: this.d.ip, detail: publicDetail(e) });
      throw e;
    }
    if (this.closed) {
      sock.destroy();
      throw AppError.of('host_unavailable', 'the connection ended');
    }
    const up = new ssh2.Client();
    return new Promise((resolve, reject) => {
      const fail = (e: Error) => {
        log.warn('ssh relay: no session on the owner', { server: this.d.serverId, detail: e.message });
        reject(AppError.of('host_unavailable', 'the host that runs this server did not open the session; try again shortly', { retryAfter: 2 }));
      };
      up.once('error', fail);
      up.once('ready', () => {
        up.off('error', fail);
        up.on('error', (e: Error) => log.debug('ssh relay: owner connection error', { server: this.d.serverId, detail: e.message }));
        // the owner's side ended (it stopped, the channel broke): so does the user's, once its
        // sessions said so and the client closed them (OpenSSH drops output it has not yet
        // printed when the connection ends first); bounded: a client that reads nothing does not hold it
        up.once('close', () => {
          const t = setTimeout(() => this.client.end(), FAREWELL_MS);
          void Promise.all(this.sessions).then(() => (clearTimeout(t), this.client.end()));
        });
        if (this.closed) up.end();
        resolve(up);
      });
      up.connect({ sock, username: 'root', readyTimeout: this.d.readyTimeoutMs ?? 15_000, keepaliveInterval: 15_000, keepaliveCountMax: 4 });
    });
  }

  /** The user's connection closed: the owner's goes too (which ends what it runs). */
  close(): void {
    this.closed = true;
    void this.upstream.then(
      (up) => up.end(),
      () => {},
    );
  }

  /** A session channel the user opened: its requests are relayed once the owner's side is open. */
  session(accept: () => Session): void {
    const session = accept();
    let pty: PseudoTtyOptions | undefined;
    const env: Record<string, string> = {};
    let started = false;
    let up: ClientChannel | undefined;
    let closed = false;
    session.on('close', () => {
      closed = true;
      up?.close();
    });
    session.on('pty', (ok: Accept, no: Reject, info) => {
      if (started) return no?.();
      pty = { rows: info.rows, cols: info.cols, height: info.height, width: info.width, term: info.term, modes: info.modes };
      ok?.();
    });
    session.on('env', (ok: Accept, no: Reject, info) => {
      if (started || !acceptEnv(info.key, info.val)) return no?.();
      env[info.key] = info.val;
      ok?.();
    });
    session.on('window-change', (ok: Accept, no: Reject, info) => {
      if (!pty) return no?.();
      pty = { ...pty, rows: info.rows, cols: info.cols, height: info.height, width: info.width };
      up?.setWindow(info.rows, info.cols, info.height, info.width);
      ok?.();
    });
    session.on('signal', (ok: Accept, no: Reject, info) => {
      if (!up) return no?.();
      try {
        up.signal(String(info.name).replace(/^SIG/, ''));
      } catch {
        return no?.(); // a name ssh2 does not know
      }
      ok?.();
    });
    session.on('auth-agent', (_a: Accept, no: Reject) => no?.());
    session.on('x11', (_a: Accept, no: Reject) => no?.());

    type Opener = (c: ssh2.Client, cb: (err: Error | undefined, ch: ClientChannel) => void) => void;
    const begin = (ok: Accept<ServerChannel>, no: Reject, what: string, open: Opener) => {
      if (started || !ok) return no?.();
      started = true;
      const ch = ok();
      if (!ch) return;
      ch.on('error', () => {});
      this.upstream.then(
        (c) => {
          if (closed) return;
          try {
            open(c, (err, remote) => {
              if (err) {
                this.d.log.info('ssh relay: the owner refused a session', { server: this.d.serverId, what, detail: err.message });
                return refuse(ch, `the server refused the ${what}`);
              }
              up = remote;
              if (closed) return void remote.close();
              this.pipeSession(ch, remote);
            });
          } catch (e) {
            refuse(ch, publicDetail(e));
          }
        },
        (e: unknown) => refuse(ch, publicDetail(e)),
      );
    };
    session.on('shell', (ok: Accept<ServerChannel>, no: Reject) => begin(ok, no, 'shell', (c, cb) => c.shell(pty ?? false, { env }, cb as never)));
    session.on('exec', (ok: Accept<ServerChannel>, no: Reject, info) => {
      const command = String(info.command);
      begin(ok, no, 'command', (c, cb) => c.exec(command, { env, ...(pty ? { pty } : {}) }, cb as never));
    });
    session.on('subsystem', (ok: Accept<ServerChannel>, no: Reject, info) => {
      if (info.name !== 'sftp') return no?.();
      begin(ok, no, 'sftp session', (c, cb) => c.subsys('sftp', cb as never));
    });
  }

  /** Both byte streams of a started session, then the exit status (after all output) and the close. */
  private pipeSession(ch: ServerChannel, remote: ClientChannel): void {
    let exit: { code: number } | { signal: string; core: boolean; desc: string } | undefined;
    remote.on('exit', (code: number | null, signal?: string, core?: boolean, desc?: string) => {
      exit = code !== null && code !== undefined ? { code } : { signal: String(signal ?? 'KILL').replace(/^SIG/, ''), core: !!core, desc: desc ?? '' };
    });
    const closed = new Promise((r) => remote.once('close', r));
    const userClosed = new Promise<void>((r) => ch.once('close', () => r()));
    remote.on('error', () => ch.destroy());
    remote.pipe(ch, { end: false });
    remote.stderr.pipe(ch.stderr, { end: false });
    ch.pipe(remote);
    const done = (async () => {
      await Promise.all([ended(remote), ended(remote.stderr)]);
      await flushed(ch.stderr);
      await flushed(ch);
      if (!exit) await closed; // the exit status comes before the close, after the EOF
      if (!ch.writable) return;
      if (!exit) {
        ch.stderr.write('rootbox: the connection to the host that runs this server was lost\r\n');
        exit = { code: 255 };
      }
      if ('code' in exit) ch.exit(exit.code);
      else ch.exit(exit.signal, exit.core, exit.desc);
      ch.end();
    })().then(() => userClosed); // the user's client has it all once it closed its side too
    this.sessions.add(done);
    void done.finally(() => this.sessions.delete(done));
  }

  /** `-L`: the same direct-tcpip channel opened on the owner, then both ways. */
  tcpip(accept: () => ServerChannel | undefined, reject: () => void, info: TcpipRequestInfo): void {
    const refuse = (code: number, why: string) => rejectWithReason(this.client, reject, code, why);
    this.upstream.then(
      (c) => {
        try {
          c.forwardOut(info.srcIP, info.srcPort, info.destIP, info.destPort, (err, remote) => {
            if (err) {
              const reason = (err as Error & { reason?: number }).reason;
              return refuse(typeof reason === 'number' ? reason : CONNECT_FAILED, err.message.replace(/^\(SSH\) Channel open failure: /, ''));
            }
            const ch = accept();
            if (!ch) return void remote.close();
            ch.on('error', () => remote.destroy());
            remote.on('error', () => ch.destroy());
            ch.on('close', () => remote.close());
            remote.on('close', () => ch.close());
            ch.pipe(remote);
            remote.pipe(ch);
          });
        } catch (e) {
          refuse(CONNECT_FAILED, publicDetail(e));
        }
      },
      (e: unknown) => refuse(CONNECT_FAILED, publicDetail(e)),
    );
  }
}

function refuse(channel: ServerChannel, message: string): void {
  if (!channel.writable) return;
  channel.stderr.write(`rootbox: ${message}\r\n`);
  channel.exit(1);
  channel.end();
}
