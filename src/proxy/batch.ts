// Write coalescing across connections. The writes made while one batch of ready events is
// handled (a poll phase) reach the kernel back to back once the batch is done (setImmediate runs
// right after the poll phase): upstream sockets are corked until then, and small complete answers
// are finished then. A peer (the app, or a client) woken by the first write finds the rest
// already waiting, instead of being woken — and its idle CPU interrupted — once per request.
// The delay is the rest of the current batch, nothing when the daemon is idle.

import type { Socket } from 'node:net';

const corked = new Set<Socket>();
const tasks: Array<() => void> = [];
let scheduled = false;

function flush(): void {
  scheduled = false;
  for (const s of corked) if (s.writableCorked > 0) s.uncork();
  corked.clear();
  // what the tasks hold or schedule in turn waits for the next batch
  const now = tasks.splice(0, tasks.length);
  for (const t of now) {
    try {
      t();
    } catch (e) {
      // a task's own failure must not cost the others their turn, nor the daemon its life
      process.emitWarning(e as Error);
    }
  }
}

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(flush);
}

/** Corks `s` until the current batch of events has been handled. */
export function holdWrites(s: Socket): void {
  if (corked.has(s)) return;
  corked.add(s);
  s.cork();
  schedule();
}

/** Runs `task` once the current batch of events has been handled (tasks handle their own errors). */
export function afterBatch(task: () => void): void {
  tasks.push(task);
  schedule();
}
