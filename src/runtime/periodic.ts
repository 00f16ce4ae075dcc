// A look at the servers every few seconds that never overlaps itself (a slow look skips the
// next turn instead of running beside it) and knows whether it is the daemon's first (what a
// counter holds then was told by the daemon before). OomWatch and FlowWatch are such looks.

import type { Logger } from '../log/index.js';

export abstract class Periodic {
  private timer?: NodeJS.Timeout;
  private busy = false;
  /** True during the first look of this daemon. */
  protected first = true;

  constructor(
    private readonly what: string,
    private readonly periodic: { log: Logger; everyMs?: number },
  ) {}

  start(): void {
    void this.tick();
    this.timer = setInterval(() => void this.tick(), this.periodic.everyMs ?? 2000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One look now, unless one is under way; its failure is logged, never thrown. */
  async tick(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      await this.look();
    } catch (err) {
      this.periodic.log.error(`${this.what} failed`, { err });
    } finally {
      this.first = false;
      this.busy = false;
    }
  }

  protected abstract look(): Promise<void>;
}
