// Time as the daemon's parts see it: the current time and timers, behind one small interface so
// a test moves time instead of waiting for it (DESIGN part 4: time injected, not slept). The
// system clock's timers never keep the process alive (unref'd): each part stops its own.

/** A timer that can be put off again (its period starts over) or cancelled. */
export interface Timer {
  cancel(): void;
  /** Starts the wait over from now (a one-shot timer that already fired runs again). */
  refresh(): void;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Runs `fn` once, `ms` from now. */
  after(ms: number, fn: () => void): Timer;
  /** Runs `fn` every `ms` from now on, until cancelled. */
  every(ms: number, fn: () => void): Timer;
}

function wrap(t: NodeJS.Timeout, clear: (t: NodeJS.Timeout) => void): Timer {
  t.unref();
  return { cancel: () => clear(t), refresh: () => void t.refresh() };
}

/** The real clock: Date.now and node's timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  after: (ms, fn) => wrap(setTimeout(fn, ms), clearTimeout),
  every: (ms, fn) => wrap(setInterval(fn, ms), clearInterval),
};

/** Resolves once `ms` passed by `clock`. */
export function pause(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.after(ms, () => resolve()));
}

/** `p`, or the error `late()` makes once `ms` passed by `clock` (the timer cancelled once `p` settles). */
export function deadline<T>(clock: Clock, p: Promise<T>, ms: number, late: () => Error): Promise<T> {
  let t: Timer | undefined;
  const timeout = new Promise<never>((_, reject) => (t = clock.after(ms, () => reject(late()))));
  return Promise.race([p, timeout]).finally(() => t?.cancel());
}
