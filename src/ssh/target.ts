// The server an authenticated SSH connection opened: whether it may be used right now
// (suspended, unknown to the runtime), waking it when it sleeps, and holding it awake while a
// channel is open. Waking, holding and touching are the presence module's (one wake per server
// however many channels ask).

import { AppError } from '../errors.js';
import type { Presence } from '../presence/index.js';
import type { Runtime, RuntimeServer } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';

export interface Target {
  readonly id: string;
  readonly slug: string;
  /** A sentence for the user when the server must not be used now; null when it may. */
  refusal(): string | null;
  /** Wakes the server if needed and returns its runtime view (ip, state). */
  ready(): Promise<RuntimeServer>;
  /** Keeps the server awake until the returned function is called. */
  hold(): () => void;
  touch(): void;
}

export interface TargetDeps {
  runtime: Pick<Runtime, 'get'>;
  presence: Presence;
  /** Fresh record lookup, so a suspension made while connected applies to new channels. */
  current(id: string): ServerRecord | undefined;
}

export function createTarget(rec: ServerRecord, deps: TargetDeps): Target {
  const id = rec.id;
  return {
    id,
    slug: rec.slug,
    refusal() {
      const now = deps.current(id);
      if (!now) return `server ${id} no longer exists`;
      if (now.suspended)
        return `server ${now.slug} (${id}) is suspended: the free grant is used up and there is no credit; add credit or verify a phone number to resume it`;
      return null;
    },
    async ready() {
      await deps.presence.wake(id);
      const rs = deps.runtime.get(id);
      if (!rs) throw AppError.of('server_not_found', `server ${id} is not known to the container runtime`);
      if (rs.state === 'failed' || rs.state === 'creating') throw AppError.of('server_not_ready', `server ${rec.slug} is ${rs.state}; try again in a moment`);
      return rs;
    },
    hold() {
      return deps.presence.hold(id);
    },
    touch() {
      deps.presence.touch(id);
    },
  };
}
