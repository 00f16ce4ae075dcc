// Ordered start and reverse stop of the daemon's parts, with rollback: when a part fails to
// start, the parts already started are stopped in reverse order and the error is rethrown.

import type { Logger } from './log/index.js';

export interface Part {
  name: string;
  start(): Promise<void> | void;
  stop(): Promise<void> | void;
}

export async function startAll(parts: readonly Part[], log: Logger): Promise<() => Promise<void>> {
  const started: Part[] = [];
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
      await p.start();
      started.push(p);
    } catch (e) {
      log.error('start failed; stopping what started', { part: p.name, err: e });
      await stopAll();
      throw e;
    }
  }
  return stopAll;
}
