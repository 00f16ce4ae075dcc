// The idle tracker: the daemon's one implementation of `Presence`. It records activity (touch),
// open connections (hold/release) and puts a server to sleep (Runtime.stop) once nothing touched
// it for `idleTimeout`, unless it is never_sleep. wake() starts a sleeping server once, however
// many callers ask at the same time, and waits for a sleep in progress to finish first. It also
// knows the truthful transient state (`waking`, also while a woken app is still starting, as the
// proxy reports) that the runtime's own record cannot show.

import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import type { Presence, PresenceState } from './types.js';
import { metrics } from '../metrics/index.js';

export interface IdleOptions {
  runtime: Pick<Runtime, 'start' | 'stop' | 'get' | 'list'>;
  /** Whether a server must never sleep (read at every check, so a change applies at once). */
  neverSleep(id: string): boolean;
  idleTimeout: number;
  checkInterval: number;
  log: Logger;
  now?: () => number;
}

export class IdleTracker implements Presence, PresenceState {
  private readonly last = new Map<string, number>();
  private readonly holds = new Map<string, number>();
  private readonly waking = new Map<string, Promise<void>>();
  private readonly sleeping = new Map<string, Promise<void>>();
  /** Woken servers whose app is not answering yet (reported by the proxy). */
  private readonly starting = new Map<string, Promise<unknown>>();
  private readonly sleepListeners: ((id: string) => void)[] = [];
  private timer?: NodeJS.Timeout;
  /** Number of Runtime.start calls made by wake() (observability and tests). */
  starts = 0;

  constructor(private readonly opts: IdleOptions) {}

  private now(): number {
    return this.opts.now ? this.opts.now() : Date.now();
  }

  touch(id: string): void {
    this.last.set(id, this.now());
  }

  hold(id: string): () => void {
    this.holds.set(id, (this.holds.get(id) ?? 0) + 1);
    this.touch(id);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.holds.get(id) ?? 1) - 1;
      if (n <= 0) this.holds.delete(id);
      else this.holds.set(id, n);
      this.touch(id);
    };
  }

  /** True when a request must wait for wake() before the server's processes can answer. */
  needsWake(id: string): boolean {
    return this.waking.has(id) || this.sleeping.has(id) || this.opts.runtime.get(id)?.state !== 'running';
  }

  wake(id: string): Promise<void> {
    this.touch(id);
    const inflight = this.waking.get(id);
    if (inflight) return inflight;
    if (!this.needsWake(id)) return Promise.resolve();
    const p = (async () => {
      await this.sleeping.get(id);
      const srv = this.opts.runtime.get(id);
      if (!srv) throw AppError.of('server_not_found', `server ${id} does not exist`);
      if (srv.state === 'running') return;
      if (srv.state === 'creating') throw AppError.of('server_creating', 'the server is still being created', { retryAfter: 2 });
      const started = this.now();
      this.starts++;
      await this.opts.runtime.start(id).catch((err: unknown) => {
        metrics.woke(0, false);
        throw err;
      });
      metrics.woke((this.now() - started) / 1000, true);
      this.opts.log.info('server woke', { server: id, ms: this.now() - started });
    })().finally(() => {
      this.waking.delete(id);
      this.touch(id);
    });
    this.waking.set(id, p);
    return p;
  }

  /** The state to show: the runtime's, except while a wake is under way (`waking`), which
   *  lasts for a running server until its app answers when a caller said it waits for that. */
  state(id: string): ServerState | undefined {
    const s = this.opts.runtime.get(id)?.state;
    if (s === undefined) return undefined;
    return this.waking.has(id) || (s === 'running' && this.starting.has(id)) ? 'waking' : s;
  }

  /** The server counts as waking until `until` settles (the proxy waits for a woken app). */
  startingUntil(id: string, until: Promise<unknown>): void {
    const p = until.then(
      () => {},
      () => {},
    );
    this.starting.set(id, p);
    void p.then(() => {
      if (this.starting.get(id) === p) this.starting.delete(id);
    });
  }

  /** Called after a server was put to sleep (the proxy forgets its app was listening). */
  onSleep(fn: (id: string) => void): void {
    this.sleepListeners.push(fn);
  }

  /** Whether anything holds the server awake right now. */
  busy(id: string): boolean {
    return (this.holds.get(id) ?? 0) > 0;
  }

  /** One pass: every running server idle for idleTimeout, not held, not never_sleep, sleeps. */
  check(): void {
    const now = this.now();
    const seen = new Set<string>();
    for (const s of this.opts.runtime.list()) {
      seen.add(s.id);
      if (s.state !== 'running') continue;
      const last = this.last.get(s.id);
      if (last === undefined) {
        this.last.set(s.id, now); // first seen (created, or running at boot): its idle time starts now
        continue;
      }
      if (this.busy(s.id) || this.waking.has(s.id) || this.sleeping.has(s.id)) continue;
      if (now - last < this.opts.idleTimeout) continue;
      if (this.opts.neverSleep(s.id)) continue;
      this.sleep(s.id, now - last);
    }
    for (const id of this.last.keys()) if (!seen.has(id) && !this.holds.has(id)) this.last.delete(id);
  }

  private sleep(id: string, idleMs: number): void {
    const p = (async () => {
      try {
        await this.opts.runtime.stop(id);
        this.opts.log.info('server sleeps', { server: id, idleMs });
        metrics.slept();
        for (const fn of this.sleepListeners) fn(id);
      } catch (err) {
        this.opts.log.error('could not put server to sleep', { server: id, err });
      }
    })().finally(() => this.sleeping.delete(id));
    this.sleeping.set(id, p);
  }

  forget(id: string): void {
    this.last.delete(id);
    this.holds.delete(id);
  }

  start(): void {
    this.timer ??= setInterval(() => this.check(), this.opts.checkInterval);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
