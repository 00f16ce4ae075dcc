// The SSH listener: one ssh2 server for all servers on this host. It checks the native crypto
// binding, loads the host keys, admits TCP connections itself (unauthenticated ones capped per
// source and in total with fair shares, each under a hard login deadline: admission.ts) before
// handing them to ssh2, and gives each connection its life (connection.ts: limits failed logins
// per address, authenticates by key (the key names the server), wakes the server at login and
// hands channels to the session and forward handlers, at most `maxChannels` open per
// connection). In cluster mode a key of a server another host runs (the registry's shared keys,
// kept in memory by the placement cache; a miss costs a catch-up read within a budget per source:
// auth.ts) is checked the same way and the connection relayed to that host over the channel
// (relay.ts); the other way, a channel stream another host opened for a login it checked is taken
// as an authenticated connection to the server it names (acceptForwarded).
// stop() closes the listener and every connection, which kills what they run.

import { createServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import ssh2 from 'ssh2';
import type { Connection } from 'ssh2';
import type { Logger } from '../log/index.js';
import type { Presence } from '../presence/index.js';
import type { Runtime } from '../runtime/index.js';
import { Admission, type Ticket } from './admission.js';
import { ALGORITHMS, assertNativeCrypto } from './algorithms.js';
import { Budget, CommandSlots } from './budget.js';
import { serveConnection, type ConnectionContext } from './connection.js';
import { loadHostKeys, type HostKey } from './hostkeys.js';
import { AuthLimiter, normalizeIp } from './ratelimit.js';
import type { Elsewhere, SockOf, SshDeps, SshOptions } from './types.js';
import { MissBudget } from '../misses.js';

export type { Elsewhere, SshDeps, SshOptions } from './types.js';

/** How long a socket whose side ssh2 ended (disconnect sent) may wait for the client's FIN. */
const LINGER_MS = 1000;

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
  /** What every connection shares of this server (connection.ts). */
  private readonly connections: ConnectionContext;

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
    this.connections = {
      deps,
      limiter: this.limiter,
      commands: this.commands,
      misses: this.misses,
      elsewhere: () => this.elsewhere,
      port: () => this.port,
      closed: (client) => this.clients.delete(client),
    };
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
    serveConnection(client, { ip, port: info.port, ticket, forwardedFor }, this.connections);
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
