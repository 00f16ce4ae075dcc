// Write coalescing across connections. The writes made while one batch of ready events is
// handled (a poll phase) reach the kernel back to back once the batch is done (setImmediate runs
// right after the poll phase): upstream sockets are corked until then, and small complete answers
// are finished then. A peer (the app, or a client) woken by the first write finds the rest
// already waiting, instead of being woken — and its idle CPU interrupted — once per request.
// The delay is the rest of the current batch, nothing when the daemon is idle. The corked
// sockets and pending tasks are a Batch's, owned by the forwarder that makes the writes.

import type { Socket } from 'node:net';

export class Batch {
  private readonly corked = new Set<Socket>();
  private readonly tasks: Array<() => void> = [];
  private scheduled = false;

  private readonly flush = (): void => {
    this.scheduled = false;
    for (const s of this.corked) if (s.writableCorked > 0) s.uncork();
    this.corked.clear();
    // what the tasks hold or schedule in turn waits for the next batch
    const now = this.tasks.splice(0, this.tasks.length);
    for (const t of now) {
      try {
        t();
      } catch (e) {
        // a task's own failure must not cost the others their turn, nor the daemon its life
        process.emitWarning(e as Error);
      }
    }
  };

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  /** Corks `s` until the current batch of events has been handled. */
  holdWrites(s: Socket): void {
    if (this.corked.has(s)) return;
    this.corked.add(s);
    s.cork();
    this.schedule();
  }

  /** Runs `task` once the current batch of events has been handled (tasks handle their own errors). */
  afterBatch(task: () => void): void {
    this.tasks.push(task);
    this.schedule();
  }
}
