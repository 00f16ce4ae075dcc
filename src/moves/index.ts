// Public surface of moves (issue 38 item 1, DESIGN part 7): a server moves from the host that
// runs it to another host of the cluster by a checkpoint in the shared store (source.ts) and a
// restore on the target that takes its placement from the epoch the source read, compare-and-set
// (target.ts); the source deletes its copy once the target confirmed. Requests for a server that
// is moving wait for the move's end (holds.ts), then go where it is. main.ts wires the parts: the
// admin API's `POST /servers/:ref/move`, the target's side under the channel's API app
// (`answer`, for peers only), the runtime's start guard and the edge's front (`holdOf*`).
// A dead host's servers are recovered on the others from their newest checkpoints (recover.ts).
// A server handed over here that a crash or a lost answer left pending, or whose takeover a crash
// cut short, is resolved once the registry answers and then every RESUME_EVERY_MS (takeover.ts).
// A server this host asked another to take whose outcome an earlier run (or this one) did not
// learn is held and settled from the registry (asked.ts). The part itself (startMoves): part.ts.

export { startMoves, type Moves } from './part.js';
export type { MoveReport, MovesDeps } from './types.js';
export type { RecoveryReport } from './recover.js';
export { startDrain, drainTarget, type Drain, type DrainHost, type DrainProgress, type DrainOptions } from './drain.js';
