// Holds a move's final checkpoint on its source (the one taken once the server stopped: its
// comment starts "moved to ") until the test lets it go, by wrapping that host's checkpoints'
// `take` in this process (an in-process host of s3cluster.ts): the move is then stopped at a
// point a test can act in — the server held and stopped, nothing asked of the target yet.

import type { TestDaemon } from '../../helpers/daemon.js';

export interface HeldTake {
  /** Resolves once the move asked for its final checkpoint. */
  reached: Promise<void>;
  /** Lets the checkpoint go on. */
  release: () => void;
  /** Puts the host's own `take` back. */
  restore: () => void;
}

export function holdFinalCheckpoint(d: TestDaemon): HeldTake {
  const cps = d.daemon.hosting.core.checkpoints!;
  const take = cps.take.bind(cps);
  let reach!: () => void;
  let release!: () => void;
  const reached = new Promise<void>((r) => (reach = r));
  const gate = new Promise<void>((r) => (release = r));
  cps.take = async (rec, account, kind, comment) => {
    if (comment?.startsWith('moved to ')) (reach(), await gate);
    return take(rec, account, kind, comment);
  };
  return { reached, release, restore: () => void (cps.take = take) };
}
