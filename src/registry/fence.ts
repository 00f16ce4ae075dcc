// The wake fence (registry mode, DESIGN part 6): before this host starts a server's container
// (any start: a wake, a restart, an account's resume, the boot-time reconcile — the runtime's
// start guard, wired in main.ts) it compares and bumps the server's epoch in the registry (one
// write by primary key: names.ts `startAt`, from the epoch this host wrote last) and refuses when
// the registry says the server is not this host's to run at that epoch:
//   - placed on another host, or here at an epoch this host did not write (another instance
//     under this name, or a change this host missed), or lost (this name was taken over by
//     another instance): 503 `server_moved` (two hosts never run the same server);
//   - deleted (its placement's tombstone, no placement since): 404 `server_not_found` (a server
//     deleted while this host was down or cut off is never resurrected here).
// The fence only refuses on such a positive answer: a registry that cannot be reached, or that
// has neither placement nor tombstone for the server (made before this host joined), leaves the
// host to start its own servers from what it has (registry trouble is survivable). While this
// host's heartbeat finds the registry unreachable the fence does not try to read it (a reboot's
// reconcile, a burst of wakes: no connect timeout waited per start for the same answer). While
// this host fences itself (selffence.ts: it reaches neither the registry nor any peer, and another
// host may soon recover its servers) every start is refused, 503 `host_fenced`; so is every start
// whose placement is not read while the fence's stop is unsettled (a peer answered before the
// registry: a server may have been recovered elsewhere meanwhile). A thaw of a dozing server asks
// the same (`checkThaw`, synchronous: no placement read, so refused while unsettled).
// A server this host asked another host to take, the move's outcome not known yet (asked.ts: a
// mark kept across a restart), starts only on its placement read in that very check: the registry
// down or its read failed, 503 `move_unsettled` (the target may run it now), and never thawed; the
// registry's `started` removes the mark. Placed elsewhere or deleted, the mark stays until this
// host's copy is gone (the moves part removes both, moves/asked.ts): a later registry outage must
// not start that copy either.

import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { AskedMoves } from './asked.js';
import type { RegistryNames, StartAnswer } from './names.js';

/** What the registry says of a server's placement, as far as the fence reads it. */
export type FenceAnswer = StartAnswer;

/** What the fence asks the registry's names: a start of a server at the epoch this host wrote (names.ts). */
export type FenceNames = Pick<RegistryNames, 'startAt'>;

export class WakeFence {
  /** Starts refused because the registry places the server elsewhere or deleted it (observability and tests). */
  refused = 0;

  /** `registry`: whether this host's last heartbeat reached the registry (`down`: the fence starts
   *  from what this host has) and whether this run holds its host name there (`not-held`: another
   *  instance or run took it, or never let this one claim it — every start is refused). */
  constructor(
    private readonly host: string,
    private readonly names: FenceNames,
    private readonly log: Logger,
    private readonly registry: () => 'down' | 'held' | 'not-held' = () => 'held',
    /** Asked first: throws while this host fences itself (selffence.ts: cut off from the registry and every peer). */
    private readonly cutOff: (id: string) => void = () => {},
    /** Whether the self-fence stopped servers and has not read their placements since (selffence.ts `unsettled`). */
    private readonly unsettled: () => boolean = () => false,
    /** The servers whose move this host asked for and whose outcome it has not learnt (asked.ts). */
    private readonly asked: Pick<AskedMoves, 'has' | 'clear'> = { has: () => false, clear: () => {} },
  ) {}

  /** Throws 503 host_fenced when a dozing server of this host may not be thawed now: while the host
   *  fences itself, or while the fence's stop is unsettled (a thaw reads no placement); 503
   *  move_unsettled while the server's move's outcome is unknown. */
  checkThaw(id: string): void {
    this.cutOff(id);
    if (this.unsettled()) throw fenceUnsettled(this.log, id);
    if (this.asked.has(id)) throw moveUnsettled(this.log, id);
  }

  /** Resolves when this host may start `id` (its epoch bumped); throws 503 server_moved when the
   *  registry names another host, another epoch or a lost placement, 404 server_not_found when
   *  it deleted the server. */
  async check(id: string): Promise<void> {
    this.cutOff(id);
    const registry = this.registry();
    if (registry === 'down') {
      if (this.unsettled()) throw fenceUnsettled(this.log, id);
      if (this.asked.has(id)) throw moveUnsettled(this.log, id);
      this.log.warn('registry unreachable; starting from what this host has, its placement not read', { server: id });
      return;
    }
    if (registry === 'not-held') {
      this.refused++;
      this.log.error('not starting a server: this run does not hold its host name in the registry', { server: id, host: this.host });
      throw AppError.of('server_moved', `this host does not hold the name ${this.host} in the cluster now; it starts no server under it`);
    }
    let placed: FenceAnswer;
    try {
      placed = await this.names.startAt(id);
    } catch (err) {
      if (this.unsettled()) throw fenceUnsettled(this.log, id);
      if (this.asked.has(id)) throw moveUnsettled(this.log, id);
      this.log.warn('placement not read before a start; starting from what this host has', {
        server: id,
        code: isAppError(err) ? err.code : undefined,
        detail: (err as Error).message,
      });
      return;
    }
    if (!placed || (placed !== 'deleted' && 'started' in placed)) {
      // still this host's (or a server the registry does not know): the move did not happen
      if (this.asked.has(id)) (this.asked.clear(id), this.log.info('a server whose move’s outcome was unknown is still this host’s', { server: id }));
      return;
    }
    this.refused++;
    if (placed === 'deleted') {
      this.log.error('not starting a server the registry deleted', { server: id });
      throw AppError.of('server_not_found', 'this server was deleted in the cluster; this host does not start it');
    }
    if (placed.host !== this.host) {
      this.log.error('not starting a server the registry places on another host', { server: id, host: placed.host, epoch: placed.epoch });
      throw AppError.of('server_moved', 'this server now runs on another host of the cluster; this host does not start it', { retryAfter: 5 });
    }
    this.log.error(
      placed.lost
        ? 'not starting a server the registry marks lost (this host name was taken over by another instance)'
        : 'not starting a server the registry places here at an epoch this host did not write',
      { server: id, epoch: placed.epoch, mine: placed.mine },
    );
    throw AppError.of('server_moved', 'the cluster registry no longer places this server on this host as it knows it; this host does not start it', {
      retryAfter: 5,
    });
  }
}

/** The refusal of a start or thaw whose placement is not read while the server's move's outcome is unknown. */
function moveUnsettled(log: Logger, id: string): AppError {
  log.warn('not starting or thawing a server: this host asked another to take it and has not learnt whether it did', { server: id });
  return AppError.of(
    'move_unsettled',
    'this server was being moved to another host and whether the move happened is not known until the cluster registry answers: it is not started here meanwhile; try again shortly',
    { retryAfter: 5 },
  );
}

/** The refusal of a start or thaw whose placement is not read while the self-fence's stop is unsettled. */
function fenceUnsettled(log: Logger, id: string): AppError {
  log.warn('not starting or thawing a server: this host fenced itself and has not read its placement since', { server: id });
  return AppError.of('host_fenced', 'this host was cut off from the cluster and has not read where this server runs since; try again shortly', {
    retryAfter: 5,
  });
}
