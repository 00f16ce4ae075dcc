// Fencing at wake (registry mode, DESIGN part 6): before this host starts a sleeping server's
// container it reads the server's placement in the registry (one read by primary key) and refuses
// with 503 `server_moved` when the registry names another host: two hosts never run the same
// server. The fence only refuses on that positive answer: a registry that cannot be reached, or
// that has no row for the server, leaves the host to wake its own servers from what it has
// (registry trouble is survivable). A thaw is not a start (the container runs, frozen), so only
// Runtime.start passes through here.

import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';

/** What the fence reads of the registry: this host's name and a server's placement. */
export interface PlacementSource {
  readonly host: string;
  readonly names: { placement(serverId: string): Promise<{ host: string; epoch: number } | undefined> };
}

export class WakeFence {
  /** Starts refused because the registry places the server elsewhere (observability and tests). */
  refused = 0;

  constructor(
    private readonly registry: PlacementSource,
    private readonly log: Logger,
  ) {}

  /** Resolves when this host may start `id`; throws 503 server_moved when the registry names another host. */
  async check(id: string): Promise<void> {
    let placed: { host: string; epoch: number } | undefined;
    try {
      placed = await this.registry.names.placement(id);
    } catch (err) {
      this.log.warn('placement not read before a wake; waking from what this host has', {
        server: id,
        code: isAppError(err) ? err.code : undefined,
        detail: (err as Error).message,
      });
      return;
    }
    if (!placed || placed.host === this.registry.host) return;
    this.refused++;
    this.log.error('not starting a server the registry places on another host', { server: id, host: placed.host, epoch: placed.epoch });
    throw AppError.of('server_moved', 'this server now runs on another host of the cluster; this host does not start it', { retryAfter: 5 });
  }
}
