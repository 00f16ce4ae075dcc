// Exposed TCP ports: public port → (server, container port), allocated from the configured
// pool atomically so two requests never get the same port. A new exposure is `pending` until
// its port listens and the change is committed; a restarted daemon drops pending ones. Every
// change here commits with a synced transaction, so an answered /expose survives a crash.

import type { LmdbEnv } from './db.js';

export interface Exposure {
  port: number;
  serverId: string;
  containerPort: number;
  /** Allocated, not yet acknowledged. */
  pending?: boolean;
}

export class ExposureStore {
  private readonly db;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<Exposure>('exposures');
  }

  /** Exposures of a server, pending ones included. */
  byServer(serverId: string): Exposure[] {
    return this.all().filter((e) => e.serverId === serverId);
  }

  all(): Exposure[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }

  /** The server's exposure of a container port, or a newly allocated one (pending when asked);
   *  undefined when the pool is full. */
  allocate(
    serverId: string,
    containerPort: number,
    first: number,
    last: number,
    o: { pending?: boolean } = {},
  ): { exposure: Exposure; created: boolean } | undefined {
    return this.env.txSync(() => {
      const existing = this.byServer(serverId).find((e) => e.containerPort === containerPort);
      if (existing) return { exposure: existing, created: false };
      for (let port = first; port <= last; port++) {
        if (this.db.get(port) !== undefined) continue;
        const exposure: Exposure = { port, serverId, containerPort, ...(o.pending ? { pending: true } : {}) };
        this.db.putSync(port, exposure);
        return { exposure, created: true };
      }
      return undefined;
    });
  }

  /** Acknowledges a pending exposure; false when it is no longer this server's. */
  commit(port: number, serverId: string): boolean {
    return this.env.txSync(() => {
      const e = this.db.get(port);
      if (!e || e.serverId !== serverId) return false;
      if (e.pending) this.db.putSync(port, { port, serverId, containerPort: e.containerPort });
      return true;
    });
  }

  release(port: number): void {
    this.env.txSync(() => this.db.removeSync(port));
  }

  /** Releases the port only while it still holds this server's exposure (not a newer one). */
  releaseIf(port: number, serverId: string): void {
    this.env.txSync(() => {
      if (this.db.get(port)?.serverId === serverId) this.db.removeSync(port);
    });
  }
}
