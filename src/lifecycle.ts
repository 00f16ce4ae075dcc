// Ordered start and reverse stop of the daemon's parts, with rollback: when a part fails to
// start, the parts already started are stopped in reverse order and the error is rethrown.
// A part is named after the field it adds to the daemon's record: it is built from the record
// (the parts started before it), and stopped by its own stop() unless it says otherwise.

import type { Logger } from './log/index.js';

type Stop = () => Promise<void> | void;

export interface Part<D> {
  readonly name: string;
  /** Builds the part from what started before it, adds it to `d`; returns how to stop it. */
  start(d: D): Promise<Stop>;
}

/** A part kept as d[name]: `make` takes what it needs from `d`; `stop` defaults to the part's own stop(). */
export function part<D, K extends keyof D & string>(name: K, make: (d: D) => D[K] | Promise<D[K]>, stop?: (p: D[K]) => Promise<void> | void): Part<D> {
  return {
    name,
    start: async (d) => {
      const p = (d[name] = await make(d));
      return () => (stop ? stop(p) : (p as { stop(): Promise<void> | void }).stop());
    },
  };
}

/** `part` for one daemon record type, so each part's name and make are checked against it. */
export const partsOf =
  <D>() =>
  <K extends keyof D & string>(name: K, make: (d: D) => D[K] | Promise<D[K]>, stop?: (p: D[K]) => Promise<void> | void): Part<D> =>
    part<D, K>(name, make, stop);

/** Nothing to stop (the part holds no resource of its own). */
export const nothing = (): void => {};

export async function startAll<D>(parts: readonly Part<D>[], d: D, log: Logger): Promise<() => Promise<void>> {
  const started: { name: string; stop: Stop }[] = [];
  const stopAll = async () => {
    for (const p of [...started].reverse()) {
      try {
        await p.stop();
        log.info('stopped', { part: p.name });
      } catch (e) {
        log.error('stop failed', { part: p.name, err: e });
      }
    }
    started.length = 0;
  };
  for (const p of parts) {
    try {
      started.push({ name: p.name, stop: await p.start(d) });
    } catch (e) {
      log.error('start failed; stopping what started', { part: p.name, err: e });
      await stopAll();
      throw e;
    }
  }
  return stopAll;
}
