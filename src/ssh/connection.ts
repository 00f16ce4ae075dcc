// One SSH connection's life, admitted and handed to ssh2 (server.ts): its logins (by key, the key
// naming the server: auth.ts; at most MAX_AUTH_TRIES refusals; a connection another host
// forwarded over the channel already checked there, taken with 'none'), the server woken at login,
// its channels (sessions: session.ts; direct-tcpip: forward.ts; at most \`maxChannels\` open, each
// exec within the connection's and the server's command budgets), or, for a server another host
// runs, the whole connection relayed to that host (relay.ts); a failed login counted against its
// address when the connection closes.

import type { Connection, ServerChannel, Session } from 'ssh2';
import type { ServerRecord } from '../store/index.js';
import type { Ticket } from './admission.js';
import { authenticate, type AuthOutcome } from './auth.js';
import { Budget, type CommandSlots } from './budget.js';
import { forwardTcp, rejectWithReason } from './forward.js';
import type { AuthLimiter } from './ratelimit.js';
import { Relay } from './relay.js';
import { serveSession } from './session.js';
import { createTarget, type Target } from './target.js';
import type { Elsewhere, SshDeps } from './types.js';
import { metrics } from '../metrics/index.js';
import type { MissBudget } from '../misses.js';

/** Refused auth requests one connection may make before it is dropped (OpenSSH MaxAuthTries). */
const MAX_AUTH_TRIES = 6;
/** SSH_OPEN_RESOURCE_SHORTAGE (RFC 4254 §5.1): OpenSSH prints "open failed: resource shortage: …". */
const RESOURCE_SHORTAGE = 4;

/** What every connection shares of its SSH server (server.ts's SshServer). */
export interface ConnectionContext {
  deps: SshDeps;
  limiter: AuthLimiter;
  commands: CommandSlots;
  misses: MissBudget;
  /** Cluster mode: servers of other hosts (as the server knows them when the connection comes). */
  elsewhere(): Elsewhere | undefined;
  /** The SSH listener's port. */
  port(): number;
  /** The connection closed. */
  closed(client: Connection): void;
}

/** Serves `client` (from `ip`, its port `at.port`), admitted by `at.ticket` or forwarded by another host for server `at.forwardedFor`. */
export function serveConnection(client: Connection, at: { ip: string; port: number; ticket?: Ticket; forwardedFor?: string }, c: ConnectionContext): void {
  const { log } = c.deps;
  const { ip, ticket, forwardedFor } = at;
  const channels = new Budget(c.deps.options.maxChannels);
  const execs = new Budget(c.deps.options.maxExecs);
  const takeExec = () => c.commands.take(server!.id, execs);
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
  const elsewhere = c.elsewhere();
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
      server = ctx.method === 'none' && ctx.username === 'root' ? c.deps.servers.get(forwardedFor) : undefined;
      return server ? ctx.accept() : ctx.reject();
    }
    const r = authenticate(ctx, ip, { servers: c.deps.servers, limiter: c.limiter, log, elsewhere: elsewhere?.keys, misses: c.misses });
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
      relay = new Relay(client, { open: () => elsewhere.open(serverId, { ip, port: at.port }), serverId, ip, log });
      return;
    }
    if (!server) return client.end();
    target = createTarget(server, {
      runtime: c.deps.runtime,
      presence: c.deps.presence,
      current: (id) => c.deps.servers.get(id),
    });
    log.info('ssh login', { ip, server: server.id, slug: server.slug, ...(forwardedFor ? { forwarded: true } : {}) });
    // Start waking a sleeping server now; channels wait for the same wake.
    if (!target.refusal()) target.ready().catch((e) => log.info('ssh wake failed', { server: server!.id, err: (e as Error).message }));
  });

  const connection = () => ({ clientIp: ip, clientPort: at.port, serverIp: c.deps.options.host, serverPort: c.port() });

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
    serveSession(session, { target, runtime: c.deps.runtime, connection: connection(), log, onConnectionClose, takeExec });
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
        const blocked = c.limiter.fail(ip);
        log.info('ssh login failed', { ip, why: failure, attempts: refusals, blocked });
      }
    }
    c.closed(client);
    relay?.close();
    for (const fn of [...cleanups]) fn();
    cleanups.clear();
  });
}
