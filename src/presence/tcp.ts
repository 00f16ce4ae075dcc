// Exposed TCP ports: the daemon accepts on a public port and pipes each connection to a port
// of the server's container, waking the server first. While the connection is open the server is
// not stopped; bytes either way are activity, so a connection quiet for the idle timeout lets the
// server doze and the client's next byte thaws it (presence.connection). Each direction ends on
// its own: a client that sends its request and shuts down its write side (FIN) still gets the
// answer, the FIN is passed on to the container and back, and the pair is closed once both
// directions are done (or at once when either side fails). Bytes the client's socket took are
// reported for egress metering (billing's EgressMeter). Hosting opens and closes the ports (its
// PortListener).

import { createServer, connect, type Server, type Socket } from 'node:net';
import { EgressMeter } from '../billing/index.js';
import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import type { Presence } from './types.js';

export interface TcpExposerDeps {
  host: string;
  runtime: Pick<Runtime, 'get'>;
  presence: Presence;
  log: Logger;
  /** Called with bytes sent from the container to the outside. */
  onEgress?(serverId: string, bytes: number): void;
  /** A suspended server (out of credit, or by the operator) is not woken: connections are closed. */
  suspended?(serverId: string): boolean;
  connectTimeoutMs?: number;
}

export class TcpExposer {
  private readonly listeners = new Map<number, { server: Server; sockets: Set<Socket> }>();
  private readonly meter: EgressMeter | undefined;

  constructor(private readonly d: TcpExposerDeps) {
    if (d.onEgress) this.meter = new EgressMeter(d.onEgress);
  }

  async open(port: number, serverId: string, containerPort: number): Promise<void> {
    if (this.listeners.has(port)) return;
    const sockets = new Set<Socket>();
    const server = createServer({ allowHalfOpen: true }, (client) => void this.pipe(client, serverId, containerPort, sockets));
    server.on('error', (e) => this.d.log.warn('exposed port error', { port, err: e.message }));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, this.d.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.listeners.set(port, { server, sockets });
  }

  private async pipe(client: Socket, serverId: string, containerPort: number, sockets: Set<Socket>): Promise<void> {
    if (this.d.suspended?.(serverId)) return void client.destroy();
    sockets.add(client);
    const release = this.d.presence.connection(serverId);
    let upstream: Socket | undefined;
    const done = () => {
      release();
      sockets.delete(client);
      client.destroy();
      upstream?.destroy();
    };
    // A socket that closed with both of its directions done waits for the other one; any other
    // close (an error, a reset, a destroy) ends the pair.
    const clean = (s: Socket) => s.readableEnded && s.writableFinished;
    const closed = (s: Socket, other: () => Socket | undefined) => () => {
      const o = other();
      if (!clean(s) || !o || o.closed) done();
    };
    client.on('error', done);
    client.on(
      'close',
      closed(client, () => upstream),
    );
    client.pause();
    try {
      await this.d.presence.wake(serverId);
    } catch (e) {
      this.d.log.warn('exposed port: wake failed', { serverId, err: (e as Error).message });
      return done();
    }
    const ip = this.d.runtime.get(serverId)?.ip;
    if (!ip || client.destroyed) return done();
    const up = connect({ host: ip, port: containerPort, timeout: this.d.connectTimeoutMs ?? 10_000, allowHalfOpen: true });
    upstream = up;
    up.on('timeout', () => up.setTimeout(0) && done());
    up.once('connect', () => up.setTimeout(0));
    up.on('error', done);
    up.on(
      'close',
      closed(up, () => client),
    );
    up.on('data', () => this.d.presence.touch(serverId));
    this.meter?.socket(client, serverId);
    // pipe() ends the other side when one side's FIN arrives: the half-close goes through
    client.pipe(up);
    up.pipe(client);
    // the client's bytes are activity, and thaw a server that dozed while the connection was quiet
    client.on('data', () => this.d.presence.touch(serverId));
    client.resume();
  }

  async close(port: number): Promise<void> {
    const l = this.listeners.get(port);
    if (!l) return;
    this.listeners.delete(port);
    for (const s of l.sockets) s.destroy();
    await new Promise((r) => l.server.close(() => r(undefined)));
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.listeners.keys()].map((p) => this.close(p)));
  }
}
