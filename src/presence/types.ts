// What the rest of the daemon asks of sleep and wake: the proxy, the SSH server and exposed TCP
// ports wake a server and keep it awake while they use it; hosting and billing read its
// truthful state. Implemented by the idle tracker (idle.ts).

import type { ServerState } from '../runtime/index.js';

export interface Presence {
  /** Starts the server if it sleeps; concurrent callers share one start. */
  wake(id: string): Promise<void>;
  /** Marks the server busy until the returned release function is called (open connections). */
  hold(id: string): () => void;
  /** Records activity now (a request, a keystroke). */
  touch(id: string): void;
}

/** The state a server truly has now (the runtime's record cannot show `waking`). */
export interface PresenceState {
  /** running / sleeping / waking / …; undefined for an id the runtime does not know. */
  state(id: string): ServerState | undefined;
}
