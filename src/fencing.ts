// How this host's servers meet the two fences of cluster mode: the registry's self-fence
// (registry/selffence.ts), which freezes then stops them while the daemon runs and is cut off, and
// the detached watchdog that outlives the daemon (runtime/fencewatch.ts), fed every tick and at
// every start the wake fence lets go with the servers that run or start. Wired by main.ts.

import { systemClock, type Clock } from './clock.js';
import type { Config } from './config/index.js';
import { fenceBounds, fenceStateFile, type FencedServers, type Registry } from './registry/index.js';
import { cgroupPath, startFenceWatch, type Runtime } from './runtime/index.js';

/** This host's servers as the self-fence acts on them (registry/selffence.ts): frozen where the
 *  runtime can freeze (else stopped at once), stopped without a parked container — one it froze
 *  killed where it stands, without a grace in which it would run (write, answer) again. */
export function fencedServers(rt: Runtime): FencedServers {
  return {
    running: () =>
      rt
        .list()
        .filter((s) => s.state === 'running')
        .map((s) => s.id),
    frozen: (id) => rt.frozen?.(id) !== undefined,
    freeze: (id) => (rt.freeze ? rt.freeze(id) : rt.stop(id, { park: false })),
    thaw: (id) => rt.thaw?.(id) ?? Promise.resolve(),
    stop: (id) => rt.stop(id, { park: false, ...(rt.frozen?.(id) !== undefined ? { graceMs: 0 } : {}) }),
  };
}

export interface FenceWatching {
  /** At the daemon's stop: the watchdog stays while servers run. */
  stop(leftRunning: boolean): void;
  /** A server the fence just let start: in the watchdog's file before its container exists (a
   *  kill -9 before the next tick must not leave it running unwatched, then recovered elsewhere). */
  starting(id: string): void;
}

/** Starts the fence that outlives this daemon (runtime/fencewatch.ts) and feeds it, every
 *  recoverAfter/20 (at most a second) and at every start the fence lets go, the last contact and
 *  the servers that run or start. The last contact is the contact's wall clock less how long it has
 *  been cut off (both the contact's clocks); the ticks go by `clock` (the daemon's). */
export function watchFence(r: Registry, rt: Runtime, cfg: Readonly<Config>, clock: Clock = systemClock): FenceWatching {
  const b = fenceBounds(cfg.cluster.recoverAfter);
  const w = startFenceWatch({
    dataDir: cfg.dataDir,
    cgroup: (id) => cgroupPath(cfg.runtime, id),
    freezeMs: b.freezeMs,
    stopMs: b.stopMs,
    settleFile: fenceStateFile(cfg.dataDir),
  });
  // let start since the last tick; by the next one the runtime lists them waking or running
  const starting = new Set<string>();
  const beat = () => {
    const running = rt
      .list()
      .filter((s) => s.state === 'running' || s.state === 'waking')
      .map((s) => s.id);
    w.beat(r.contact.wallNow() - (r.contact.cutOffForMs() ?? 0), [...new Set([...running, ...starting])]);
  };
  const tick = () => (beat(), starting.clear());
  tick();
  const t = clock.every(Math.max(100, Math.min(1000, Math.floor(cfg.cluster.recoverAfter / 20))), tick);
  return {
    stop: (left) => (t.cancel(), beat(), w.stop(left)),
    starting: (id) => (starting.add(id), beat()),
  };
}

/** Whether any server of this host still runs (or is frozen) as the daemon stops. */
export function leftRunning(rt: Runtime | undefined): boolean {
  return rt?.list().some((s) => s.state === 'running' || s.state === 'waking') ?? false;
}
