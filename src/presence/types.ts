// What the rest of the daemon asks of sleep and wake: the proxy, the SSH server and exposed TCP
// ports wake (or thaw) a server and keep it awake while they use it; hosting and billing read its
// truthful state. Implemented by the idle tracker (idle.ts).

import type { ServerState } from '../runtime/index.js';

export interface Presence {
  /** Starts the server if it sleeps, thaws it if it dozes; concurrent callers share one. A start
   *  the runtime's start guard refuses (cluster mode: server_moved) rejects with its error. */
  wake(id: string): Promise<void>;
  /** Marks the server busy until the returned release function is called (open connections). */
  hold(id: string): () => void;
  /** An open connection (WebSocket, exposed port): the server is not stopped while it is open,
   *  but may doze while it carries no bytes; the owner calls touch() for the client's bytes (a
   *  touch thaws a dozing server) and gives `sent`, a count of what the server sent, or touches
   *  for those too. Returns the release function. */
  connection(id: string, sent?: () => number): () => void;
  /** Records activity now (a request, a keystroke, a byte on a connection); thaws a dozing server. */
  touch(id: string): void;
}

/** The state a server truly has now (the runtime's record cannot show `waking`). */
export interface PresenceState {
  /** running / sleeping / waking / …; undefined for an id the runtime does not know. */
  state(id: string): ServerState | undefined;
}
