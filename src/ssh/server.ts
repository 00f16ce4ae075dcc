// The SSH listener: one ssh2 server for all servers on this host. It checks the native crypto
// binding, loads the host keys, limits failed logins per address, authenticates by key (the key
// names the server), wakes the server at login and hands channels to the session and forward
// handlers. stop() closes the listener and every connection, which kills what they run.

import type { AddressInfo } from 'node:net';
import ssh2 from 'ssh2';
import type { Connection, ServerChannel, Session } from 'ssh2';
import type { Logger } from '../log/index.js';
import type { Presence, Runtime } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';
import { ALGORITHMS, assertNativeCrypto } from './algorithms.js';
import { authenticate, type ServerLookup } from './auth.js';
import { forwardTcp } from './forward.js';
import { loadHostKeys, type HostKey } from './hostkeys.js';
import { AuthLimiter, normalizeIp } from './ratelimit.js';
import { serveSession } from './session.js';
import { createTarget, type Target } from './target.js';

export interface SshOptions {
  host: string;
  port: number;
  dataDir: string;
  maxAuthFailures: number;
  authFailureWindow: number;
  loginGraceTime: number;
}

export interface SshDeps {
  options: SshOptions;
  servers: ServerLookup & { get(id: string): ServerRecord | undefined };
  /** A getter, so the runtime can be wired after the SSH part starts (or be absent). */
  runtime?: () => Runtime | undefined;
  presence?: () => Presence | undefined;
  log: Logger;
}

/** Connections that have not authenticated yet, per daemon (OpenSSH's MaxStartups idea). */
const MAX_UNAUTHENTICATED = 200;
/** Refused auth requests one connection may make before it is dropped (OpenSSH MaxAuthTries). */
const MAX_AUTH_TRIES = 6;

export class SshServer {
  private srv?: ssh2.Server;
  private readonly clients = new Set<Connection>();
  private readonly limiter: AuthLimiter;
  private unauthenticated = 0;
  hostKeys: HostKey[] = [];

  constructor(private readonly deps: SshDeps) {
    this.limiter = new AuthLimiter({ maxFailures: deps.options.maxAuthFailures, windowMs: deps.options.authFailureWindow });
  }

  get port(): number {
    return (this.srv?.address() as AddressInfo | null)?.port ?? 0;
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
    srv.on('error', (e: Error) => log.error('ssh listener error', { err: e }));
    await new Promise<void>((resolve, reject) => {
      const onErr = (e: Error) => reject(e);
      srv.once('error', onErr);
      srv.listen(options.port, options.host, () => {
        srv.removeListener('error', onErr);
        resolve();
      });
    });
    this.srv = srv;
    log.info('ssh listening', {
      host: options.host,
      port: this.port,
      nativeCrypto: crypto.native,
      ssh2: crypto.from,
      hostKeys: this.hostKeys.map((k) => k.fingerprint),
    });
  }

  async stop(): Promise<void> {
    const srv = this.srv;
    this.srv = undefined;
    const closed = new Promise<void>((resolve) => (srv ? srv.close(() => resolve()) : resolve()));
    for (const c of this.clients) c.end();
    // end() sends a disconnect and half-closes; a client that never closes its side is dropped.
    const hard = setTimeout(() => {
      for (const c of this.clients) (c as unknown as { _sock?: { destroy(): void } })._sock?.destroy();
    }, 1000);
    await closed;
    clearTimeout(hard);
    this.clients.clear();
  }

  private onConnection(client: Connection, info: { ip: string; port: number }): void {
    const { log } = this.deps;
    const ip = normalizeIp(info.ip);
    client.on('error', (e: Error) => log.debug('ssh connection error', { ip, err: e.message }));
    if (this.limiter.blocked(ip) || this.unauthenticated >= MAX_UNAUTHENTICATED) {
      log.info('ssh connection dropped', { ip, why: this.limiter.blocked(ip) ? 'too many failed logins' : 'too many unauthenticated connections' });
      client.end();
      return;
    }
    // Small SFTP replies must not wait behind Nagle's algorithm (uploads are request/response).
    (client as unknown as { setNoDelay(v: boolean): void }).setNoDelay(true);
    this.clients.add(client);
    this.unauthenticated += 1;
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
    const grace = setTimeout(() => {
      log.info('ssh login timed out', { ip });
      client.end();
    }, this.deps.options.loginGraceTime);
    grace.unref();

    client.on('authentication', (ctx) => {
      const r = authenticate(ctx, ip, { servers: this.deps.servers, limiter: this.limiter, log });
      if (r.ok === true) {
        server = r.server;
        ctx.accept();
      } else if (r.ok === false) {
        if (r.why) failure = r.why;
        if (r.blocked || (r.why && ++refusals >= MAX_AUTH_TRIES)) client.end();
      }
    });

    client.on('ready', () => {
      clearTimeout(grace);
      authed = true;
      this.unauthenticated -= 1;
      if (!server) return client.end();
      target = createTarget(server, {
        runtime: this.deps.runtime?.(),
        presence: this.deps.presence?.(),
        current: (id) => this.deps.servers.get(id),
      });
      log.info('ssh login', { ip, server: server.id, slug: server.slug });
      // Start waking a sleeping server now; channels wait for the same wake.
      if (!target.refusal()) target.ready().catch((e) => log.info('ssh wake failed', { server: server!.id, err: (e as Error).message }));
    });

    const connection = () => ({ clientIp: ip, clientPort: info.port, serverIp: this.deps.options.host, serverPort: this.port });

    client.on('session', (accept: () => Session, reject: () => void) => {
      if (!target) return reject();
      const session = accept();
      serveSession(session, { target, runtime: this.deps.runtime?.(), connection: connection(), log, onConnectionClose });
    });

    client.on('tcpip', (accept: () => ServerChannel, reject: () => void, req) => {
      if (!target) return reject();
      forwardTcp(client, accept, reject, req, { target, log, onConnectionClose });
    });

    client.on('close', () => {
      clearTimeout(grace);
      if (!authed) {
        this.unauthenticated -= 1;
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
