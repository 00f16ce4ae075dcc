// Exposed TCP ports: public port → (server, container port), allocated from the configured
// pool atomically so two requests never get the same port.

import type { LmdbEnv } from './db.js';

export interface Exposure {
  port: number;
  serverId: string;
  containerPort: number;
}

export class ExposureStore {
  private readonly db;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<Exposure>('exposures');
  }

  byServer(serverId: string): Exposure[] {
    return this.all().filter((e) => e.serverId === serverId);
  }

  all(): Exposure[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }

  /** The server's exposure of a container port, or a newly allocated one; undefined when the pool is full. */
  allocate(serverId: string, containerPort: number, first: number, last: number): { exposure: Exposure; created: boolean } | undefined {
    return this.env.txSync(() => {
      const existing = this.byServer(serverId).find((e) => e.containerPort === containerPort);
      if (existing) return { exposure: existing, created: false };
      for (let port = first; port <= last; port++) {
        if (this.db.get(port) !== undefined) continue;
        const exposure = { port, serverId, containerPort };
        this.db.putSync(port, exposure);
        return { exposure, created: true };
      }
      return undefined;
    });
  }

  release(port: number): void {
    this.db.removeSync(port);
  }
}
