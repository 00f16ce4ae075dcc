// The SSH listener: one ssh2 server for all servers on this host. It checks the native crypto
// binding, loads the host keys, admits TCP connections itself (unauthenticated ones capped per
// source and in total with fair shares, each under a hard login deadline: admission.ts) before handing them to
// ssh2, limits failed logins per address, authenticates by key (the key names the server), wakes
// the server at login and hands channels to the session and forward handlers, at most
// `maxChannels` open per connection. stop() closes the listener and every connection, which
// kills what they run.

import { createServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import ssh2 from 'ssh2';
import type { Connection, ServerChannel, Session } from 'ssh2';
import type { Logger } from '../log/index.js';
import type { Presence } from '../presence/index.js';
import type { Runtime } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';
import { Admission, type Ticket } from './admission.js';
import { ALGORITHMS, assertNativeCrypto } from './algorithms.js';
import { authenticate, type ServerLookup } from './auth.js';
import { Budget, CommandSlots } from './budget.js';
import { forwardTcp, rejectWithReason } from './forward.js';
import { loadHostKeys, type HostKey } from './hostkeys.js';
import { AuthLimiter, normalizeIp } from './ratelimit.js';
import { serveSession } from './session.js';
import { createTarget, type Target } from './target.js';
import { metrics } from '../metrics/index.js';

export interface SshOptions {
  host: string;
  port: number;
  dataDir: string;
  maxAuthFailures: number;
  authFailureWindow: number;
  loginGraceTime: number;
  maxUnauthenticatedPerAddress: number;
  maxUnauthenticated: number;
  maxChannels: number;
  maxExecs: number;
  maxExecsPerServer: number;
}

export interface SshDeps {
  options: SshOptions;
  servers: ServerLookup & { get(id: string): ServerRecord | undefined };
  /** The runtime and the idle tracker: both started before the SSH part. */
  runtime: Runtime;
  presence: Presence;
  log: Logger;
}

/** Refused auth requests one connection may make before it is dropped (OpenSSH MaxAuthTries). */
const MAX_AUTH_TRIES = 6;
/** SSH_OPEN_RESOURCE_SHORTAGE (RFC 4254 §5.1): OpenSSH prints "open failed: resource shortage: …". */
const RESOURCE_SHORTAGE = 4;
/** How long a socket whose side ssh2 ended (disconnect sent) may wait for the client's FIN. */
const LINGER_MS = 1000;

type SockOf = { _sock?: Socket };

export class SshServer {
  private srv?: ssh2.Server;
  private tcp?: NetServer;
  private readonly sockets = new Set<Socket>();
  private readonly clients = new Set<Connection>();
  private readonly tickets = new WeakMap<Socket, Ticket>();
  private readonly limiter: AuthLimiter;
  private readonly admission: Admission;
  private readonly commands: CommandSlots;
  private readonly offConnection = new Budget(Number.MAX_SAFE_INTEGER);
  hostKeys: HostKey[] = [];

  constructor(private readonly deps: SshDeps) {
    const o = deps.options;
    this.commands = new CommandSlots(o.maxExecsPerServer);
    this.limiter = new AuthLimiter({ maxFailures: o.maxAuthFailures, windowMs: o.authFailureWindow });
    this.admission = new Admission({
      maxPerSource: o.maxUnauthenticatedPerAddress,
      maxTotal: o.maxUnauthenticated,
      graceMs: o.loginGraceTime,
      onTimeout: (source, ip) => deps.log.info('ssh login timed out', { ip, source }),
      onRefused: (ip, why, limit) => deps.log.info('ssh connection refused', { ip, why, limit }),
      onEvicted: (ip, newcomer) => deps.log.info('ssh unauthenticated connection dropped for a newcomer', { ip, newcomer, limit: o.maxUnauthenticated }),
    });
  }

  /** A slot of the server's command budget for a command that runs over no SSH connection (the
   *  HTTP exec and file operations): its release function, or the sentence saying why there is none. */
  takeServerSlot(serverId: string): (() => void) | string {
    return this.commands.take(serverId, this.offConnection);
  }

  get port(): number {
    return (this.tcp?.address() as AddressInfo | null)?.port ?? 0;
  }

  /** Open TCP connections and the unauthenticated ones among them (of one address's source when given). */
  stats(ip?: string): { connections: number; unauthenticated: number } {
    return { connections: this.sockets.size, unauthenticated: this.admission.unauthenticated(ip === undefined ? undefined : normalizeIp(ip)) };
  }

  async start(): Promise<void> {
    const { options, log } = this.deps;
    const crypto = assertNativeCrypto();
    this.hostKeys = loadHostKeys(options.dataDir);
    const srv = new ssh2.Server(
      {
        hostKeys: this.hostKeys.map((k) => k.privateKey),
        algorithms: ALGORITHMS as never,
        ident: 'rootbox',
        keepaliveInterval: 15_000,
        keepaliveCountMax: 4,
      },
      (client, info) => this.onConnection(client, info),
    );
    // ssh2 never listens itself: admitted sockets are injected, so refusals cost no crypto.
    const tcp = createServer({ noDelay: true }, (socket) => this.onSocket(srv, socket));
    tcp.on('error', (e: Error) => log.error('ssh listener error', { err: e }));
    await new Promise<void>((resolve, reject) => {
      const onErr = (e: Error) => reject(e);
      tcp.once('error', onErr);
      tcp.listen(options.port, options.host, () => {
        tcp.removeListener('error', onErr);
        resolve();
      });
    });
    this.srv = srv;
    this.tcp = tcp;
    log.info('ssh listening', {
      host: options.host,
      port: this.port,
      nativeCrypto: crypto.native,
      ssh2: crypto.from,
      hostKeys: this.hostKeys.map((k) => k.fingerprint),
    });
  }

  async stop(): Promise<void> {
    const tcp = this.tcp;
    this.tcp = undefined;
    this.srv = undefined;
    const closed = new Promise<void>((resolve) => (tcp ? tcp.close(() => resolve()) : resolve()));
    const withClient = new Set<Socket>();
    for (const c of this.clients) {
      const sock = (c as unknown as SockOf)._sock;
      if (sock) withClient.add(sock);
      c.end();
    }
    for (const s of this.sockets) if (!withClient.has(s)) s.destroy();
    // end() sends a disconnect and half-closes; a client that never closes its side is dropped.
    const hard = setTimeout(() => {
      for (const s of this.sockets) s.destroy();
    }, LINGER_MS);
    await closed;
    clearTimeout(hard);
    this.clients.clear();
  }

  /** A new TCP connection: admitted (and handed to ssh2) or destroyed before any SSH work. */
  private onSocket(srv: ssh2.Server, socket: Socket): void {
    const ip = normalizeIp(socket.remoteAddress);
    const ticket = this.admission.admit(socket, ip);
    if (!ticket) return;
    this.sockets.add(socket);
    this.tickets.set(socket, ticket);
    socket.once('close', () => this.sockets.delete(socket));
    // ssh2 only half-closes (after a protocol error, a refused login, a keepalive timeout, end()):
    // a client that never closes its side would keep the socket forever.
    socket.once('finish', () => setTimeout(() => socket.destroy(), LINGER_MS).unref());
    srv.injectSocket(socket);
  }

  private onConnection(client: Connection, info: { ip: string; port: number }): void {
    const { log } = this.deps;
    const ip = normalizeIp(info.ip);
    const socket = (client as unknown as SockOf)._sock;
    const ticket = socket && this.tickets.get(socket);
    client.on('error', (e: Error) => log.debug('ssh connection error', { ip, err: e.message }));
    if (!socket || !ticket || socket.destroyed) return void socket?.destroy();
    this.clients.add(client);
    const channels = new Budget(this.deps.options.maxChannels);
    const execs = new Budget(this.deps.options.maxExecs);
    const takeExec = () => this.commands.take(server!.id, execs);
    let authed = false;
    let server: ServerRecord | undefined;
    let target: Target | undefined;
    let refusals = 0;
    let failure: string | undefined;
    const cleanups = new Set<() => void>();
    const onConnectionClose = (fn: () => void) => {
      cleanups.add(fn);
      return () => cleanups.delete(fn);
    };

    let hungUp = false;
    client.on('authentication', (ctx) => {
      // Requests already in flight when we hung up are not looked at (no more crypto for them).
      if (hungUp) return ctx.reject();
      const r = authenticate(ctx, ip, { servers: this.deps.servers, limiter: this.limiter, log });
      if (r.ok === true) {
        server = r.server;
        ctx.accept();
      } else if (r.ok === false) {
        if (r.why) {
          failure = r.why;
          refusals += 1;
          metrics.sshLoginFailed();
        }
        if (r.hangUp || refusals >= MAX_AUTH_TRIES) {
          hungUp = true;
          client.end();
        }
      }
    });

    client.on('ready', () => {
      authed = true;
      ticket.authenticated();
      metrics.sshSession();
      if (!server) return client.end();
      target = createTarget(server, {
        runtime: this.deps.runtime,
        presence: this.deps.presence,
        current: (id) => this.deps.servers.get(id),
      });
      log.info('ssh login', { ip, server: server.id, slug: server.slug });
      // Start waking a sleeping server now; channels wait for the same wake.
      if (!target.refusal()) target.ready().catch((e) => log.info('ssh wake failed', { server: server!.id, err: (e as Error).message }));
    });

    const connection = () => ({ clientIp: ip, clientPort: info.port, serverIp: this.deps.options.host, serverPort: this.port });

    /** A channel slot for this open, freed when the open is refused or the channel closes. */
    const slot = (kind: string, reject: () => void): (() => void) | null => {
      const release = channels.take();
      if (!release) {
        log.info('ssh channel refused', { ip, server: server?.id, kind, why: 'too many open channels', limit: channels.max });
        rejectWithReason(client, reject, RESOURCE_SHORTAGE, `rootbox: too many open channels on this connection (limit ${channels.max}); close one first`);
      }
      return release;
    };

    client.on('session', (accept: () => Session, reject: () => void) => {
      if (!target) return reject();
      const release = slot('session', reject);
      if (!release) return;
      const session = accept();
      session.once('close', release);
      serveSession(session, { target, runtime: this.deps.runtime, connection: connection(), log, onConnectionClose, takeExec });
    });

    client.on('tcpip', (accept: () => ServerChannel, reject: () => void, req) => {
      if (!target) return reject();
      const release = slot('direct-tcpip', reject);
      if (!release) return;
      const acceptCounted = () => {
        const ch = accept();
        if (ch) ch.once('close', release);
        else release();
        return ch;
      };
      const rejectCounted = () => {
        release();
        reject();
      };
      forwardTcp(client, acceptCounted, rejectCounted, req, { target, log, onConnectionClose });
    });

    client.on('close', () => {
      if (!authed) {
        if (failure) {
          const blocked = this.limiter.fail(ip);
          log.info('ssh login failed', { ip, why: failure, attempts: refusals, blocked });
        }
      }
      this.clients.delete(client);
      for (const fn of [...cleanups]) fn();
      cleanups.clear();
    });
  }
}

/** The daemon's SSH part (main.ts): the server on ssh.{host,port} over the store's records, the runtime and the idle tracker. */
export async function startSsh(d: {
  cfg: { ssh: Omit<SshOptions, 'dataDir'>; dataDir: string };
  store: { servers: SshDeps['servers'] };
  runtime: Runtime;
  presence: Presence;
  log: Logger;
}): Promise<SshServer> {
  const ssh = new SshServer({
    options: { ...d.cfg.ssh, dataDir: d.cfg.dataDir },
    servers: d.store.servers,
    runtime: d.runtime,
    presence: d.presence,
    log: d.log.child({ part: 'ssh' }),
  });
  await ssh.start();
  return ssh;
}
