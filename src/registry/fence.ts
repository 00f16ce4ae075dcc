// The wake fence (registry mode, DESIGN part 6): before this host starts a server's container
// (any start: a wake, a restart, an account's resume, the boot-time reconcile — the runtime's
// start guard, wired in main.ts) it reads the server's placement in the registry (one read by
// primary key) and refuses when the registry says the server is not this host's to run:
//   - placed on another host: 503 `server_moved` (two hosts never run the same server);
//   - deleted (its placement's tombstone, no placement since): 404 `server_not_found` (a server
//     deleted while this host was down or cut off is never resurrected here).
// The fence only refuses on such a positive answer: a registry that cannot be reached, or that
// has neither placement nor tombstone for the server (made before this host joined), leaves the
// host to start its own servers from what it has (registry trouble is survivable). While this
// host's heartbeat finds the registry unreachable the fence does not try to read it (a reboot's
// reconcile, a burst of wakes: no connect timeout waited per start for the same answer).

import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';

/** What the registry says of a server's placement, as far as the fence reads it. */
export type FenceAnswer = { host: string; epoch: number } | 'deleted' | undefined;

/** What the fence reads of the registry: a server's placement, or that it was deleted. */
export interface PlacementSource {
  fenceOf(serverId: string): Promise<FenceAnswer>;
}

export class WakeFence {
  /** Starts refused because the registry places the server elsewhere or deleted it (observability and tests). */
  refused = 0;

  /** `reachable`: whether this host's last heartbeat reached the registry (Registry.up). */
  constructor(
    private readonly host: string,
    private readonly names: PlacementSource,
    private readonly log: Logger,
    private readonly reachable: () => boolean = () => true,
  ) {}

  /** Resolves when this host may start `id`; throws 503 server_moved when the registry names
   *  another host, 404 server_not_found when it deleted the server. */
  async check(id: string): Promise<void> {
    if (!this.reachable()) {
      this.log.warn('registry unreachable; starting from what this host has, its placement not read', { server: id });
      return;
    }
    let placed: FenceAnswer;
    try {
      placed = await this.names.fenceOf(id);
    } catch (err) {
      this.log.warn('placement not read before a start; starting from what this host has', {
        server: id,
        code: isAppError(err) ? err.code : undefined,
        detail: (err as Error).message,
      });
      return;
    }
    if (!placed || (placed !== 'deleted' && placed.host === this.host)) return;
    this.refused++;
    if (placed === 'deleted') {
      this.log.error('not starting a server the registry deleted', { server: id });
      throw AppError.of('server_not_found', 'this server was deleted in the cluster; this host does not start it');
    }
    this.log.error('not starting a server the registry places on another host', { server: id, host: placed.host, epoch: placed.epoch });
    throw AppError.of('server_moved', 'this server now runs on another host of the cluster; this host does not start it', { retryAfter: 5 });
  }
}
