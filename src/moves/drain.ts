// A drain of this host (issue 38 item 2): `rootbox cluster drain HOST` marks the host's row in the
// registry (registry/drains.ts); the draining host's daemon runs the drain — it is the source of
// every move. From the mark on this host takes no creates (`closed`: hosting sends them to another
// host, and the others' choice skips a draining host) and moves its servers off, at most
// `cluster.drainConcurrency` at once, each to the up host that is not draining and has the most
// room for it (counting the moves to it under way, and for a lease those that landed, until its
// lease reports them). A move that fails is recorded with why in the row (`cluster status` shows
// it) and tried again after `cluster.drainRetry`, doubled per failure — unless the target refused
// it for a reason another try does not change (move_refused): that one waits for the next drain.
// The mark is read every second, so a drain resumes after a restart of either side, and
// `cluster undrain` ends it (moves under way finish). The loop waits for the registry and the
// channel; a registry that cannot be read keeps the last mark known.

import { systemClock, type Clock, type Timer } from '../clock.js';
import { isAppError } from '../errors.js';
import { shortOf, type Capacity } from '../hosting/index.js';
import type { DrainMark } from '../registry/index.js';
import type { ServerRecord } from '../store/index.js';
import type { MoveReport, MovesDeps } from './types.js';

/** The longest wait before a failed move is tried again. */
const RETRY_MAX_MS = 10 * 60_000;

/** A host a server may go to: its lease (and channel) up, its drain mark, the room its lease reported. */
export interface DrainHost {
  name: string;
  up: boolean;
  drain: DrainMark | null;
  capacity: Partial<Record<keyof Capacity, number>>;
}

type Need = Pick<ServerRecord, 'memoryBytes' | 'diskBytes'>;

/** The host a server of `self` goes to: up, not draining, not `self`, with room for `need` once the
 *  moves under way to it (`coming`) are counted; the most memory room first, then disk, then name. */
export function drainTarget(hosts: readonly DrainHost[], self: string, need: Need, coming: ReadonlyMap<string, readonly Need[]>): string | undefined {
  const room = hosts
    .filter((h) => h.up && !h.drain && h.name !== self)
    .map((h) => {
      const c = { ...h.capacity };
      for (const n of coming.get(h.name) ?? []) {
        c.servers = (c.servers ?? 0) + 1;
        if (c.memoryRoomBytes !== undefined) c.memoryRoomBytes -= n.memoryBytes;
        if (c.diskRoomBytes !== undefined) c.diskRoomBytes -= n.diskBytes;
      }
      return { name: h.name, c };
    })
    .filter((h) => !shortOf(h.c, need));
  room.sort((a, b) => b.c.memoryRoomBytes! - a.c.memoryRoomBytes! || b.c.diskRoomBytes! - a.c.diskRoomBytes! || a.name.localeCompare(b.name));
  return room[0]?.name;
}

export interface DrainOptions {
  concurrency: number;
  retryMs: number;
  /** How long a server that landed on a host still counts against that host's reported room (its lease). */
  settleMs?: number;
  /** How often the mark is read (1 s). */
  tickMs?: number;
  now?: () => number;
  /** The timers of the drain's passes and of a landed server's settling (default: the system clock). */
  clock?: Clock;
}

/** How this host's drain goes (`rootbox status`, the metrics): undefined when it is not draining. */
export interface DrainProgress {
  since: Date;
  /** Servers moved off since the drain began, those still here, those whose last move failed, those moving now. */
  moved: number;
  left: number;
  failed: number;
  moving: number;
}

export interface Drain {
  /** Why this host takes no creates now (a phrase after "this host"), undefined when it takes them. */
  closed(): string | undefined;
  /** The drain's progress as this host last read its mark; undefined when not draining. */
  progress(): DrainProgress | undefined;
  /** Ends the loop and waits for the moves under way. */
  stop(): Promise<void>;
}

export function startDrain(
  d: Pick<MovesDeps, 'registry' | 'store' | 'log'> & { channel?: unknown; moves: { move(rec: ServerRecord, to: string): Promise<MoveReport> } },
  o: DrainOptions,
): Drain {
  const r = d.registry;
  if (!r) return { closed: () => undefined, progress: () => undefined, stop: async () => {} };
  const log = d.log.child({ part: 'drain' });
  const now = o.now ?? Date.now;
  const clock = o.clock ?? systemClock;
  const running = new Map<string, Promise<void>>();
  const coming = new Map<string, Need[]>();
  const retry = new Map<string, { at: number; attempts: number }>();
  let mark: DrainMark | null = null;
  let stopped = false;
  let timer: Timer | undefined;
  let busy = false;
  let emptyNoted = false;

  /** `final`: a refusal another try does not change (move_refused): not tried again in this drain. */
  const failed = (rec: ServerRecord, why: string, final = false) => {
    const attempts = (retry.get(rec.id)?.attempts ?? 0) + 1;
    retry.set(rec.id, { at: final ? Infinity : now() + Math.min(RETRY_MAX_MS, o.retryMs * 2 ** (attempts - 1)), attempts });
    if (final) log.error('drain: a server cannot move; it is not tried again in this drain', { server: rec.id, why });
    else log.warn('drain: a server did not move; it is tried again later', { server: rec.id, why, attempts });
    return r.drains
      .failed(r.host, rec.id, final ? `${why}; not tried again (undrain and drain again to retry)` : why)
      .catch((err) => log.warn('drain: its failure was not recorded', { err }));
  };

  const begin = (rec: ServerRecord, to: string) => {
    const list = [...(coming.get(to) ?? []), rec];
    coming.set(to, list);
    const p = d.moves
      .move(rec, to)
      .then(
        async (m) => {
          retry.delete(rec.id);
          log.info('drain: server moved', { server: rec.id, to, was: m.was, heldMs: m.held_ms });
          await r.drains.moved(r.host, rec.id).catch((err) => log.warn('drain: the move was not counted', { err }));
          return true;
        },
        async (err) => (
          await failed(rec, isAppError(err) ? err.detail : 'the move failed (see the log)', isAppError(err) && err.code === 'move_refused'),
          false
        ),
      )
      .then((landed) => {
        running.delete(rec.id);
        // a server that landed counts against the target until its lease reports it (a heartbeat or more later)
        const arrived = () => {
          const left = (coming.get(to) ?? []).filter((x) => x !== rec);
          if (left.length) coming.set(to, left);
          else coming.delete(to);
        };
        if (landed && o.settleMs) clock.after(o.settleMs, arrived);
        else arrived();
        schedule(0);
      });
    running.set(rec.id, p);
  };

  const tick = async () => {
    if (!d.channel) return; // no channel (yet, or no cluster CA): nothing can move
    await r.ready;
    try {
      const was = mark;
      mark = await r.drains.of(r.host);
      if (mark && !was) log.info('draining this host: it takes no creates, its servers move to the others', { since: mark.since });
      if (!mark && was) log.info('drain ended: this host takes creates again');
      if (!mark) retry.clear(); // a drain begun again tries every server again
    } catch {
      return; // the registry cannot be read: the last mark holds
    }
    if (!mark) return;
    // a server deleted here since its move failed is no failure of this drain any more
    const gone = Object.keys(mark.failed).filter((id) => !running.has(id) && !d.store.servers.getAny(id));
    if (gone.length) await r.drains.forget(r.host, gone).catch(() => {});
    if (running.size >= o.concurrency) return;
    const t = now();
    const todo = d.store.servers.all().filter((s) => !running.has(s.id) && (retry.get(s.id)?.at ?? 0) <= t);
    if (!todo.length) {
      const empty = !running.size && !d.store.servers.all({ withPending: true }).length;
      if (empty && !emptyNoted) log.info('drain: no server left on this host');
      emptyNoted = empty;
      return;
    }
    emptyNoted = false;
    const hosts: DrainHost[] = (await r.hosts.list()).map((h) => ({ ...h, up: h.up && r.placements.host(h.name)?.up !== false }));
    for (const rec of todo) {
      if (running.size >= o.concurrency || stopped) break;
      const to = drainTarget(hosts, r.host, rec, coming);
      if (to) begin(rec, to);
      else await failed(rec, 'no other host is up, open to servers and with room for it');
    }
  };

  function schedule(ms: number): void {
    if (stopped) return;
    timer?.cancel();
    timer = clock.after(ms, () => {
      if (busy) return schedule(100);
      busy = true;
      void tick()
        .catch((err) => log.warn('drain: a pass failed; the next one tries again', { err }))
        .finally(() => ((busy = false), schedule(o.tickMs ?? 1000)));
    });
  }
  schedule(0);

  return {
    closed: () => (mark ? 'is being drained' : undefined),
    progress: () =>
      mark
        ? {
            since: mark.since,
            moved: mark.moved,
            left: d.store.servers.all().length,
            failed: Object.keys(mark.failed).length,
            moving: running.size,
          }
        : undefined,
    stop: async () => {
      stopped = true;
      timer?.cancel();
      await Promise.allSettled([...running.values()]);
    },
  };
}
