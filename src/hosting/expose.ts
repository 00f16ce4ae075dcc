// POST/DELETE /expose: publishes a container TCP port on a public port from the configured pool.
// Allocation lives in the store; the listening and piping is done by a PortListener (the
// proxy's TcpExposer). At start-up every stored exposure is opened again.

import { AppError } from '../errors.js';
import type { Store } from '../store/index.js';
import type { ExposedPort } from './servers.js';

export interface PortListener {
  open(port: number, serverId: string, containerPort: number): Promise<void>;
  close(port: number): Promise<void>;
}

export class Exposures {
  private readonly first: number;
  private readonly last: number;

  constructor(
    private readonly store: Store,
    private readonly listener: PortListener,
    pool: string,
    private readonly publicIp: string,
  ) {
    [this.first, this.last] = pool.split('-').map(Number);
  }

  private view(port: number, containerPort: number): ExposedPort {
    const host = this.publicIp.includes(':') ? `[${this.publicIp}]` : this.publicIp;
    return { public: `${host}:${port}`, container_port: containerPort, protocol: 'tcp' };
  }

  list(serverId: string): ExposedPort[] {
    return this.store.exposures.byServer(serverId).map((e) => this.view(e.port, e.containerPort));
  }

  async expose(serverId: string, containerPort: number): Promise<ExposedPort> {
    for (let tries = 0; tries < 5; tries++) {
      const got = this.store.exposures.allocate(serverId, containerPort, this.first, this.last);
      if (!got) throw new AppError('unavailable', 'port_pool_exhausted', 'every public port of this host is in use; try again later');
      if (!got.created) return this.view(got.exposure.port, containerPort);
      try {
        await this.listener.open(got.exposure.port, serverId, containerPort);
        return this.view(got.exposure.port, containerPort);
      } catch {
        // Something else on the host holds this port: keep it marked (so it is skipped) under a
        // placeholder owner and try the next one.
        this.store.exposures.release(got.exposure.port);
        this.store.exposures.allocate('srv_host', got.exposure.port, got.exposure.port, got.exposure.port);
      }
    }
    throw new AppError('unavailable', 'port_pool_exhausted', 'could not bind a public port; try again later');
  }

  async unexpose(serverId: string, containerPort: number): Promise<void> {
    const e = this.store.exposures.byServer(serverId).find((x) => x.containerPort === containerPort);
    if (!e) throw new AppError('not_found', 'not_exposed', `port ${containerPort} of ${serverId} is not exposed`);
    await this.listener.close(e.port);
    this.store.exposures.release(e.port);
  }

  async releaseServer(serverId: string): Promise<void> {
    for (const e of this.store.exposures.byServer(serverId)) {
      await this.listener.close(e.port);
      this.store.exposures.release(e.port);
    }
  }

  /** Opens every stored exposure again (daemon start). */
  async restore(log: (msg: string, f: Record<string, unknown>) => void): Promise<void> {
    for (const e of this.store.exposures.all()) {
      if (e.serverId === 'srv_host') {
        this.store.exposures.release(e.port);
        continue;
      }
      await this.listener.open(e.port, e.serverId, e.containerPort).catch((err) => log('could not reopen exposed port', { port: e.port, err: (err as Error).message }));
    }
  }
}
