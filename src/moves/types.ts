// What the moves part reads of the daemon (main.ts passes the daemon's record): the store, the
// runtime, hosting's services (servers, exposures, checkpoints, accounts, capacity), the cluster
// registry (names, placements, hosts, shared keys) and the channel that reaches the target.

import type { Channel } from '../channel/index.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config/index.js';
import type { HostingCore } from '../hosting/index.js';
import type { Logger } from '../log/index.js';
import type { Registry } from '../registry/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import type { Store } from '../store/index.js';

export interface MovesDeps {
  cfg: Readonly<Config>;
  log: Logger;
  store: Store;
  runtime: Runtime;
  /** The truthful state of a server (waking while a wake is under way). */
  presence: { state(id: string): ServerState | undefined };
  /** Forgets what the proxy caches of a server that left this host. */
  proxy: { forget(id: string): void };
  hosting: { core: HostingCore };
  registry?: Registry;
  channel?: Channel;
  /** Metering (billing, issue 38 item 4): the host a server leaves charges it up to the hand-off
   *  and no more; the host it goes to meters it from that instant (a recovered one from its making). */
  billing?: {
    handOff(serverId: string): Promise<number>;
    handedOff(serverId: string, moved: boolean): void;
    takeOver(serverId: string, from?: number): void;
  };
  /** Milliseconds now (the unavailability a move reports). */
  now?: () => number;
  /** The timers of the moves part: its loops, deadlines and waits (default: the system clock; tests move it). */
  clock?: Clock;
  /** How long a move waits for a target whose lease runs to answer on the channel (default 5 s; tests shorten it). */
  targetWaitMs?: number;
}

/** What a finished move reports (the admin API's answer). */
export interface MoveReport {
  server: string;
  slug: string;
  from: string;
  to: string;
  /** The placement's epoch on the target. */
  epoch: number;
  /** Whether the server ran when the move began (it runs on the target again). */
  was: 'running' | 'sleeping';
  /** The checkpoint the target restored. */
  checkpoint: string;
  /** How long requests for it waited (from the stop, or the start of a sleeping server's move, to the target's confirmation;
   *  a sleeping server without an app serves its pages meanwhile: from the confirmation to the hand-over). */
  held_ms: number;
  /** Where that wait went: the stop, the final checkpoint, the target's restore and start. */
  held_phases_ms: { stop: number; checkpoint: number; target: number };
  /** The whole move. */
  took_ms: number;
  exposed_ports: { public: string; container_port: number; protocol: 'tcp' }[];
}
