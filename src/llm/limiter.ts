// A counting semaphore: at most `max` holders at once, waiters served in order; a waiter still
// queued at its deadline (performance.now()) leaves the queue.

export class Limiter {
  private active = 0;
  private readonly queue: (() => void)[] = [];

  constructor(private readonly max: number) {}

  /** Runs `fn` once a slot is free; rejects with LimiterTimeout when none freed before `deadline`. */
  async run<T>(deadline: number, fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) {
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          clearTimeout(timer);
          resolve();
        };
        const wait = deadline - performance.now();
        if (wait <= 0) return reject(new LimiterTimeout());
        const timer = setTimeout(() => {
          const i = this.queue.indexOf(go);
          if (i >= 0) this.queue.splice(i, 1);
          reject(new LimiterTimeout());
        }, wait);
        this.queue.push(go);
      });
    }
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.queue.shift()?.();
    }
  }
}

/** No slot freed before the deadline. */
export class LimiterTimeout extends Error {
  constructor() {
    super('no slot before the deadline');
    this.name = 'LimiterTimeout';
  }
}
