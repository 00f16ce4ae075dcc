// The SSH listener: one ssh2 server for all servers on this host. It checks the native crypto
// binding, loads the host keys, admits TCP connections itself (unauthenticated ones capped per
// source and in total with fair shares, each under a hard login deadline: admission.ts) before handing them to
// ssh2, limits failed logins per address, authenticates by key (the key names the server), wakes
// the server at login and hands channels to the session and forward handlers, at most
// `maxChannels` open per connection. In cluster mode a key of a server another host runs (the
// registry's shared keys, kept in memory by the placement cache; a miss costs a catch-up read
// within a budget per source: auth.ts) is checked the same way and the connection relayed to
// that host over the channel (relay.ts); the other way, a channel stream another host opened for
// a login it checked is taken as an authenticated connection to the server it names
// (acceptForwarded).
// stop() closes the listener and every connection, which kills what they run.

import { createServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import ssh2 from 'ssh2';
import type { Connection, ServerChannel, Session } from 'ssh2';
import type { Logger } from '../log/index.js';
import type { Presence } from '../presence/index.js';
import type { Runtime } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';
import { Admission, type Ticket } from './admission.js';
import { ALGORITHMS, assertNativeCrypto } from './algorithms.js';
import { authenticate, type AuthOutcome, type KeysElsewhere, type ServerLookup } from './auth.js';
import { Budget, CommandSlots } from './budget.js';
import { forwardTcp, rejectWithReason } from './forward.js';
import { loadHostKeys, type HostKey } from './hostkeys.js';
import { AuthLimiter, normalizeIp } from './ratelimit.js';
import { Relay } from './relay.js';
import { serveSession } from './session.js';
import { createTarget, type Target } from './target.js';
import { metrics } from '../metrics/index.js';
import { MissBudget } from '../misses.js';

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

/** Cluster mode: servers of other hosts, reached through the host-to-host channel (relay.ts). */
export interface Elsewhere {
  /** The servers of other hosts whose key has this fingerprint (the registry's shared keys, kept in memory). */
  keys: KeysElsewhere;
  /** A stream to the owner's SSH server, authenticated for `serverId`; throws an AppError when there is none. */
  open(serverId: string, client: { ip: string; port: number }): Promise<Duplex>;
}

/** Refused auth requests one connection may make before it is dropped (OpenSSH MaxAuthTries). */
const MAX_AUTH_TRIES = 6;
/** SSH_OPEN_RESOURCE_SHORTAGE (RFC 4254 §5.1): OpenSSH prints "open failed: resource shortage: …". */
const RESOURCE_SHORTAGE = 4;
/** How long a socket whose side ssh2 ended (disconnect sent) may wait for the client's FIN. */
const LINGER_MS = 1000;

type SockOf = { _sock?: Socket | Duplex };

export class SshServer {
  private srv?: ssh2.Server;
  private tcp?: NetServer;
  private readonly sockets = new Set<Socket | Duplex>();
  private readonly clients = new Set<Connection>();
  private readonly tickets = new WeakMap<Socket | Duplex, Ticket>();
  /** Streams of the channel another host opened for a login it checked: the server each is for. */
  private readonly forwarded = new WeakMap<Duplex, string>();
  private elsewhere?: Elsewhere;
  private readonly limiter: AuthLimiter;
  private readonly admission: Admission;
  private readonly commands: CommandSlots;
  private readonly offConnection = new Budget(Number.MAX_SAFE_INTEGER);
  /** Registry reads for keys known nowhere (a key recorded on another host a moment ago): bounded per source. */
  readonly misses = new MissBudget();
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

  /** Cluster mode (main.ts, once the channel runs): keys this host does not know are looked up among other hosts' servers. */
  reachElsewhere(e: Elsewhere): void {
    this.elsewhere = e;
  }

  /**
   * An SSH connection another host forwards over the channel (channel/ssh.ts), already
   * authenticated there for `serverId`: it logs in as that server without a key. Only the
   * channel's mutual-TLS streams come here, never a connection to the SSH port.
   */
  acceptForwarded(socket: Duplex, serverId: string, client: { ip: string; port: number }): void {
    const srv = this.srv;
    if (!srv) return void socket.destroy();
    Object.assign(socket, { remoteAddress: client.ip, remotePort: client.port });
    this.forwarded.set(socket, serverId);
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.once('finish', () => setTimeout(() => socket.destroy(), LINGER_MS).unref());
    srv.injectSocket(socket as Socket);
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
    const withClient = new Set<Socket | Duplex>();
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
    const forwardedFor = socket && this.forwarded.get(socket as Duplex);
    client.on('error', (e: Error) => log.debug('ssh connection error', { ip, err: e.message }));
    if (!socket || (!ticket && !forwardedFor) || socket.destroyed) return void socket?.destroy();
    this.clients.add(client);
    const channels = new Budget(this.deps.options.maxChannels);
    const execs = new Budget(this.deps.options.maxExecs);
    const takeExec = () => this.commands.take(server!.id, execs);
    let authed = false;
    let server: ServerRecord | undefined;
    let target: Target | undefined;
    /** The server's id when another host runs it: the connection is relayed there. */
    let remote: string | undefined;
    let relay: Relay | undefined;
    let refusals = 0;
    let failure: string | undefined;
    const cleanups = new Set<() => void>();
    const onConnectionClose = (fn: () => void) => {
      cleanups.add(fn);
      return () => cleanups.delete(fn);
    };

    let hungUp = false;
    const elsewhere = this.elsewhere;
    const decide = (r: AuthOutcome, accept: () => void) => {
      if (r.ok === true) {
        if ('remote' in r) remote = r.remote;
        else server = r.server;
        accept();
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
    };
    client.on('authentication', (ctx) => {
      // Requests already in flight when we hung up are not looked at (no more crypto for them).
      if (hungUp) return ctx.reject();
      if (forwardedFor) {
        // the host that forwarded the connection checked the key; only its 'none' is taken
        server = ctx.method === 'none' && ctx.username === 'root' ? this.deps.servers.get(forwardedFor) : undefined;
        return server ? ctx.accept() : ctx.reject();
      }
      const r = authenticate(ctx, ip, { servers: this.deps.servers, limiter: this.limiter, log, elsewhere: elsewhere?.keys, misses: this.misses });
      if (r instanceof Promise) void r.then((x) => (hungUp ? x.ok === true && ctx.reject() : decide(x, () => ctx.accept())));
      else decide(r, () => ctx.accept());
    });

    client.on('ready', () => {
      authed = true;
      ticket?.authenticated();
      metrics.sshSession();
      if (remote && elsewhere) {
        const serverId = remote;
        log.info('ssh login', { ip, server: serverId, relayed: true });
        relay = new Relay(client, { open: () => elsewhere.open(serverId, { ip, port: info.port }), serverId, ip, log });
        return;
      }
      if (!server) return client.end();
      target = createTarget(server, {
        runtime: this.deps.runtime,
        presence: this.deps.presence,
        current: (id) => this.deps.servers.get(id),
      });
      log.info('ssh login', { ip, server: server.id, slug: server.slug, ...(forwardedFor ? { forwarded: true } : {}) });
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
      if (!target && !relay) return reject();
      const release = slot('session', reject);
      if (!release) return;
      if (relay)
        return relay.session(() => {
          const s = accept();
          s.once('close', release);
          return s;
        });
      if (!target) return;
      const session = accept();
      session.once('close', release);
      serveSession(session, { target, runtime: this.deps.runtime, connection: connection(), log, onConnectionClose, takeExec });
    });

    client.on('tcpip', (accept: () => ServerChannel, reject: () => void, req) => {
      if (!target && !relay) return reject();
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
      if (relay) relay.tcpip(acceptCounted, rejectCounted, req);
      else if (target) forwardTcp(client, acceptCounted, rejectCounted, req, { target, log, onConnectionClose });
    });

    client.on('close', () => {
      if (!authed) {
        if (failure) {
          const blocked = this.limiter.fail(ip);
          log.info('ssh login failed', { ip, why: failure, attempts: refusals, blocked });
        }
      }
      this.clients.delete(client);
      relay?.close();
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
