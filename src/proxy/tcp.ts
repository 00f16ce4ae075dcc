// Exposed TCP ports: the daemon accepts on a public port and pipes each connection to a port
// of the server's container, waking the server first and holding it awake while the connection
// is open. Bytes sent back to clients are reported for egress metering.

import { createServer, connect, type Server, type Socket } from 'node:net';
import type { Logger } from '../log/index.js';
import type { Presence, Runtime } from '../runtime/index.js';

export interface TcpExposerDeps {
  host: string;
  runtime: Pick<Runtime, 'get'>;
  presence: Presence;
  log: Logger;
  /** Called with bytes sent from the container to the outside. */
  onEgress?(serverId: string, bytes: number): void;
  connectTimeoutMs?: number;
}

export class TcpExposer {
  private readonly listeners = new Map<number, { server: Server; sockets: Set<Socket> }>();

  constructor(private readonly d: TcpExposerDeps) {}

  async open(port: number, serverId: string, containerPort: number): Promise<void> {
    if (this.listeners.has(port)) return;
    const sockets = new Set<Socket>();
    const server = createServer((client) => void this.pipe(client, serverId, containerPort, sockets));
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
    sockets.add(client);
    const release = this.d.presence.hold(serverId);
    let upstream: Socket | undefined;
    const done = () => {
      release();
      sockets.delete(client);
      client.destroy();
      upstream?.destroy();
    };
    client.on('error', done);
    client.on('close', done);
    client.pause();
    try {
      await this.d.presence.wake(serverId);
    } catch (e) {
      this.d.log.warn('exposed port: wake failed', { serverId, err: (e as Error).message });
      return done();
    }
    const ip = this.d.runtime.get(serverId)?.ip;
    if (!ip || client.destroyed) return done();
    upstream = connect({ host: ip, port: containerPort, timeout: this.d.connectTimeoutMs ?? 10_000 });
    upstream.on('timeout', () => upstream?.setTimeout(0) && done());
    upstream.once('connect', () => upstream?.setTimeout(0));
    upstream.on('error', done);
    upstream.on('close', done);
    upstream.on('data', (chunk: Buffer) => {
      this.d.onEgress?.(serverId, chunk.length);
      this.d.presence.touch(serverId);
    });
    client.pipe(upstream);
    upstream.pipe(client);
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
