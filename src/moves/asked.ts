// A move this host asked for whose outcome it has not learnt (issue 38 review): the source sent the
// adopt request, the answer was lost and the registry could not say whether the target took the
// placement — then this daemon stopped or was killed, or the registry placed the server elsewhere
// while its copy is still here. The registry part keeps such a server marked across a restart
// (registry/asked.ts), and the wake fence starts or thaws it only on its placement read. Here a run
// settles each marked server (at start, and when a move of this run gives one up): its requests and
// starts held (holds.ts: they wait, as they did in the run that asked) until the registry answers
// `startAt` — read, as the fence reads it, once this run holds its name there —, then:
//   - still this host's (the epoch bumped from the one it wrote; or a server the registry does not
//     know): the mark goes, and the server runs again if it ran when its move began;
//   - placed on another host (the target took it): this host's copy goes as any stale copy's does
//     (hosting's dropMoved: read again, a disk with writes no checkpoint holds kept aside), then the
//     mark; the requests held go to the target;
//   - deleted in the cluster: the copy is deleted here too, then the mark;
//   - here at an epoch this host did not write, or lost: no move's outcome; the mark goes, the
//     fence refuses it as any such server.
// A mark without a server record (a kill between the record's removal and the copy's): what is
// left of the copy goes. The registry away: asked again, a wait doubled up to WAIT_MAX_MS.

import { systemClock } from '../clock.js';
import type { Logger } from '../log/index.js';
import type { MoveHolds } from './holds.js';
import type { MovesDeps } from './types.js';

const WAIT_MAX_MS = 10_000;

/** This host's copy of a server that left it: its ports, runtime and checkpoint records — never its
 *  checkpoints in the store (the target's now), nor its placement, slug or key in the registry. */
export async function forgetCopy(d: MovesDeps, id: string): Promise<void> {
  await d.hosting.core.exposures.releaseServer(id);
  await d.runtime.delete(id).catch((e: unknown) => {
    if ((e as { code?: string })?.code !== 'server_not_found') throw e;
  });
  for (const c of d.store.checkpoints.list(id)) await d.store.checkpoints.remove(id, c.id);
}

export class UnsettledMoves {
  private readonly settling = new Map<string, Promise<void>>();
  /** Every settling not ended yet, with its restart's start (idle). */
  private readonly all = new Set<Promise<void>>();
  /** The waits between two looks under way (the daemon's stop ends them). */
  private readonly waits = new Set<() => void>();
  /** The servers the registry placed on another host whose copy here could not go yet: only the drop is tried again. */
  private readonly away = new Set<string>();
  private stopped = false;

  constructor(
    private readonly d: MovesDeps,
    private readonly log: Logger,
    private readonly holds: MoveHolds,
  ) {}

  /** Every server marked when this run started is settled (in the background). */
  start(): void {
    const asked = this.d.registry?.asked;
    for (const id of asked?.list() ?? []) this.settle(id);
    // the marks could not be read: every server is taken as marked, each settled once the registry answers
    if (asked?.unreadable) for (const s of this.d.store.servers.all()) this.settle(s.id);
  }

  /** Settles marked server `id` in the background; its requests and starts wait meanwhile. */
  settle(id: string): void {
    if (this.stopped || this.settling.has(id) || !this.d.registry?.asked.has(id)) return;
    const p: Promise<void> = this.run(id)
      .then((restart) => {
        // settled: a new mark of it (a move asked again meanwhile) gets its own settling, not
        // left to a restart's start that may wait on that move's hold (StartGuard.waitFor)
        this.ended(id, p);
        if (restart) return this.restart(id);
      })
      .catch((err: unknown) => this.log.error('a move whose outcome was unknown was not settled; the next start tries again', { server: id, err }))
      .finally(() => this.ended(id, p));
    this.settling.set(id, p);
    this.all.add(p);
    void p.finally(() => this.all.delete(p));
  }

  private ended(id: string, p: Promise<void>): void {
    if (this.settling.get(id) === p) this.settling.delete(id);
  }

  private restart(id: string): Promise<void> {
    return this.d.runtime.start(id).then(
      () => this.log.info('a server whose move did not happen runs here again', { server: id }),
      (err: unknown) => this.log.error('a server whose move did not happen did not start again', { server: id, err }),
    );
  }

  /** Whether marked server `id` is being settled (its copy, placed elsewhere, is removed here: no other drop of it). */
  busy(id: string): boolean {
    return this.settling.has(id);
  }

  /** Ends the waits (the daemon stops: the marks stay, the next start settles them). */
  stop(): void {
    this.stopped = true;
    for (const end of [...this.waits]) end();
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const end = () => (t.cancel(), this.waits.delete(end), resolve());
      const t = (this.d.clock ?? systemClock).after(ms, end);
      this.waits.add(end);
    });
  }

  /** Resolves when every settling under way ended (tests). */
  async idle(): Promise<void> {
    while (this.all.size) await Promise.all([...this.all]);
  }

  /** Until the outcome is known (or the daemon stops); whether the server starts here again. */
  private async run(id: string): Promise<boolean> {
    const rec = this.d.store.servers.get(id);
    // a server only taken as marked (the marks unreadable) may run, never moved: its starts are
    // refused (the fence) until settled, its requests not held
    let release = rec && !this.d.registry!.asked.get(id)?.unread ? this.holds.begin(id, rec.slug) : () => {};
    let restart = false;
    try {
      this.log.warn('a move this host asked for has an unknown outcome: the server is held until the registry says where it is', {
        server: id,
        to: this.d.registry!.asked.get(id)?.to,
      });
      for (let wait = 200; !this.stopped; wait = Math.min(wait * 2, WAIT_MAX_MS)) {
        const done = await this.once(id).catch(
          (err: unknown) => (this.log.warn('a move whose outcome was unknown: not settled yet, tried again', { server: id, err }), false),
        );
        if (done === 'away') {
          // placed on another host, this copy not gone yet: the requests go where the registry
          // places it (the wake fence refuses every start here); only the drop is tried again
          release();
          release = () => {};
          this.away.add(id);
        } else if (done) {
          restart = done === 'restart';
          break;
        }
        await this.pause(wait);
      }
    } finally {
      this.away.delete(id);
      release();
    }
    return restart;
  }

  /** One look: false while the registry cannot say; 'away' while it places the server on another
   *  host and this host's copy could not go yet. */
  private async once(id: string): Promise<boolean | 'restart' | 'away'> {
    const d = this.d;
    const r = d.registry!;
    const mark = r.asked.get(id);
    if (!mark) return true; // a start read its placement meanwhile (the fence settled it)
    const rec = d.store.servers.get(id);
    if (!rec) {
      if (d.store.servers.getAny(id)) return false; // moved back here meanwhile (target.ts, pending): its adopt clears the mark
      await forgetCopy(d, id);
      r.asked.clear(id);
      this.log.info('what a moved server left here is gone', { server: id });
      return true;
    }
    if (this.away.has(id)) return this.drop(id, mark.to);
    if (!r.up) return false; // unreachable, or this run does not hold its name yet: `startAt` would not say
    let placed;
    try {
      placed = await r.names.startAt(id);
    } catch {
      return false;
    }
    const log = this.log.child({ server: id, to: mark.to });
    if (!placed || (placed !== 'deleted' && 'started' in placed)) {
      r.asked.clear(id);
      log.warn('the move asked for did not happen: the server is still this host’s');
      return mark.running ? 'restart' : true;
    }
    if (placed === 'deleted') {
      await d.hosting.core.servers.delete(rec);
      r.asked.clear(id);
      log.warn('a server whose move’s outcome was unknown was deleted in the cluster: deleted here too');
      return true;
    }
    if (placed.host !== r.host) return this.drop(id, mark.to, placed);
    r.asked.clear(id);
    log.error('a server whose move’s outcome was unknown is placed here at an epoch this host did not write: not started here', {
      epoch: placed.epoch,
      lost: placed.lost,
    });
    return true;
  }

  /** The copy here of a server the registry places on another host removed (hosting's dropMoved:
   *  its placement read again), then the mark; 'away' while the copy is still here. */
  private async drop(id: string, to: string | undefined, placed?: { host: string; epoch: number }): Promise<true | 'away'> {
    const d = this.d;
    const log = this.log.child({ server: id, to });
    const dropped = await d.hosting.core.dropMoved([id]).catch((err: unknown) => (log.warn('a moved server’s copy here not removed yet', { err }), false));
    if (!dropped || d.store.servers.get(id)) {
      if (!this.away.has(id))
        log.error('a server whose move’s outcome was unknown is placed on another host; its copy here could not go yet: tried again', { placed });
      d.proxy.forget(id);
      await d.registry!.placements.sync().catch(() => {});
      return 'away';
    }
    d.proxy.forget(id);
    await d.registry!.placements.sync().catch(() => {});
    d.registry!.asked.clear(id);
    log.warn(
      'a server whose move’s outcome was unknown is placed on another host: its copy here is gone',
      placed ? { placed: placed.host, epoch: placed.epoch } : {},
    );
    return true;
  }
}
