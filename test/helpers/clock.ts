// A clock a test moves by hand (src/clock.ts's interface): now() is what the test set, and
// advance(ms) runs every timer that falls due on the way, in time order, each at its own instant.

import type { Clock, Timer } from '../../src/clock.js';

interface Entry {
  at: number;
  every?: number;
  fn: () => void;
  ms: number;
}

export class ManualClock implements Clock {
  private t: number;
  private readonly entries = new Set<Entry>();

  constructor(start = Date.parse('2026-01-01T00:00:00Z')) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  after(ms: number, fn: () => void): Timer {
    return this.add({ at: this.t + ms, fn, ms });
  }

  every(ms: number, fn: () => void): Timer {
    return this.add({ at: this.t + ms, every: ms, fn, ms });
  }

  /** Timers waiting to fire. */
  get pending(): number {
    return this.entries.size;
  }

  /** Moves time forward by `ms`, firing what falls due on the way (an interval as often as it would have). */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let next: Entry | undefined;
      for (const e of this.entries) if (e.at <= end && (!next || e.at < next.at)) next = e;
      if (!next) break;
      this.t = next.at;
      if (next.every !== undefined) next.at += next.every;
      else this.entries.delete(next);
      next.fn();
    }
    this.t = end;
  }

  private add(e: Entry): Timer {
    this.entries.add(e);
    return {
      cancel: () => this.entries.delete(e),
      refresh: () => {
        e.at = this.t + e.ms;
        this.entries.add(e);
      },
    };
  }
}

/** The real clock with timers that keep the process alive (src/clock.ts's systemClock does not): for a
 *  part a test drives by itself, where no listener keeps the process up while it waits (the daemon's do). */
export const keptClock: Clock = {
  now: () => Date.now(),
  after: (ms, fn) => kept(setTimeout(fn, ms), clearTimeout),
  every: (ms, fn) => kept(setInterval(fn, ms), clearInterval),
};

function kept(t: NodeJS.Timeout, clear: (t: NodeJS.Timeout) => void): Timer {
  return { cancel: () => clear(t), refresh: () => void t.refresh() };
}
