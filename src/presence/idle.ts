// The idle tracker: the daemon's one implementation of `Presence`. It records activity (touch),
// work under way (hold: an HTTP exchange, an SSH channel) and open connections (connection: a
// WebSocket, an exposed-port connection), and puts a server to rest once nothing touched it for
// `idleTimeout`, unless it is never_sleep. Resting has two steps when the runtime can freeze:
//   - doze: the server's processes are frozen (Runtime.freeze), memory and sockets kept, RAM not
//     billed, state shown as `sleeping`; wake() — or any touch, e.g. a byte on a quiet open
//     connection — thaws it in milliseconds;
//   - sleep: after `dozeTimeout` dozing (or at once when dozing is off) the container is stopped
//     (Runtime.stop, memory freed) and wake() starts it again. Dozing servers are also stopped,
//     least recently used first, while host available memory is below `memoryFloor` (floor.ts picks
//     them, release.ts keeps the memory still coming back and removes parked containers).
// What idle means (activity.ts keeps it): a hold keeps the server awake (an SSH shell running a
// silent build must not be frozen). An open connection that carries no bytes for idleTimeout lets
// the server doze — its next byte from the client thaws it, its bytes waiting in the kernel — but
// it is never stopped for idleness while the connection is open (a stop would cut it).
// wake() starts or thaws a server once, however many callers ask at the same time, and waits for
// a sleep or freeze in progress first. The tracker also knows the truthful transient state
// (`waking`, also while a woken app is still starting, as the proxy reports) that the runtime's
// record cannot show. A doze outlives the daemon: at start the tracker adopts the servers a
// previous daemon left frozen (Runtime.frozen) as dozing — shown `sleeping`, not billed for RAM,
// thawed by the next wake — their doze timeout counted from the restart.

import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import type { Presence, PresenceState } from './types.js';
import { metrics } from '../metrics/index.js';
import { victims } from './floor.js';
import { Activity } from './activity.js';
import { MemoryFloor } from './release.js';

export interface IdleOptions {
  runtime: Pick<Runtime, 'start' | 'stop' | 'get' | 'list' | 'freeze' | 'thaw' | 'thawsAtOnce' | 'frozen' | 'parked' | 'unpark'>;
  /** Whether a server must never sleep (read at every check, so a change applies at once). */
  neverSleep(id: string): boolean;
  idleTimeout: number;
  checkInterval: number;
  /** How long a server dozes before it is stopped; 0 or absent (or a runtime that cannot freeze): no doze. */
  dozeTimeout?: number;
  /** Host memory kept available by stopping dozing servers (bytes; 0 or absent: none). */
  memoryFloor?: number;
  /** Host available memory in bytes (default: MemAvailable of /proc/meminfo). */
  memAvailable?: () => number;
  /** How often the memory floor is checked while servers doze (default 500 ms). */
  floorInterval?: number;
  /** How long after a stop its expected release still counts as memory coming back, unless
   *  MemAvailable has risen by it sooner (default 1500 ms: freed pages show up late). */
  floorSettle?: number;
  log: Logger;
  now?: () => number;
  /** Asked before every thaw of a dozing server; throws to refuse it (cluster mode: the registry's
   *  fence, 503 host_fenced while this host fences itself — a thawed server would run). */
  mayThaw?: (id: string) => void;
}

interface Doze {
  since: number;
  /** Which doze this is (new at each one): a look made during it holds while it lasts. */
  seq: number;
  /** What a stop is expected to give back: its anonymous memory at freeze (else cgroup usage). */
  memoryBytes: number;
}

/** How long after a thaw it is logged and counted: after the first answer it was for, as a rule (an app answers in ms). */
const THAW_REPORT_DELAY_MS = 20;

export class IdleTracker implements Presence, PresenceState {
  private readonly activity: Activity;
  private readonly floor: MemoryFloor;
  private readonly waking = new Map<string, Promise<void>>();
  private readonly sleeping = new Map<string, Promise<void>>();
  private readonly freezing = new Map<string, Promise<void>>();
  private readonly dozing = new Map<string, Doze>();
  /** Woken servers whose app is not answering yet (reported by the proxy). */
  private readonly starting = new Map<string, Promise<unknown>>();
  private readonly sleepListeners: ((id: string) => void)[] = [];
  private readonly dozeListeners: ((id: string, doze: number) => void)[] = [];
  private dozeSeq = 0;
  private timer?: NodeJS.Timeout;
  private floorTimer?: NodeJS.Timeout;
  /** Number of Runtime.start calls made by wake() (observability and tests). */
  starts = 0;
  /** Number of thaws made by wake() and dozes begun (observability and tests). */
  thaws = 0;
  dozes = 0;

  constructor(private readonly opts: IdleOptions) {
    const now = () => this.now();
    this.activity = new Activity(now);
    this.floor = new MemoryFloor({ ...opts, now });
  }

  private now(): number {
    return this.opts.now ? this.opts.now() : Date.now();
  }

  private get dozeOn(): boolean {
    return (this.opts.dozeTimeout ?? 0) > 0 && !!this.opts.runtime.freeze && !!this.opts.runtime.thaw;
  }

  private mark(id: string): void {
    this.activity.mark(id);
  }

  /** Records activity now; a dozing (or freezing) server is thawed (not awaited: bytes for it wait in the kernel). */
  touch(id: string): void {
    this.mark(id);
    if ((this.dozing.has(id) || this.freezing.has(id)) && !this.waking.has(id) && this.thawAllowed(id))
      this.wake(id).catch((err: unknown) => this.opts.log.error('could not thaw a dozing server', { server: id, err }));
  }

  hold(id: string): () => void {
    return this.activity.hold(id);
  }

  /** An open connection (WebSocket, exposed port): no stop while open; it may doze while quiet.
   *  Its owner calls touch() for the client's bytes (which thaw a dozing server); `sent`, when
   *  given, is a byte count read at every check: a change is activity (what the server sent). */
  connection(id: string, sent?: () => number): () => void {
    return this.activity.connection(id, sent);
  }

  /** True when a request must wait for wake() before the server's processes can answer. */
  needsWake(id: string): boolean {
    return this.waking.has(id) || this.sleeping.has(id) || this.freezing.has(id) || this.dozing.has(id) || this.opts.runtime.get(id)?.state !== 'running';
  }

  wake(id: string): Promise<void> {
    this.mark(id);
    const inflight = this.waking.get(id);
    if (inflight) return inflight;
    if (!this.needsWake(id)) return Promise.resolve();
    // a doze with nothing else under way: its thaw's cgroup write now, not a few awaits later
    const p = (this.dozing.has(id) && !this.sleeping.has(id) && !this.freezing.has(id) ? this.thaw(id) : this.started(id)).finally(() => {
      this.waking.delete(id);
      this.mark(id);
    });
    this.waking.set(id, p);
    return p;
  }

  /** wake() of a server that is not (only) dozing: after a sleep or freeze under way, a thaw or a start. */
  private async started(id: string): Promise<void> {
    await this.sleeping.get(id);
    await this.freezing.get(id);
    if (this.dozing.has(id)) return this.thaw(id);
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
  }

  /** The thaw of a server that dozes with nothing else under way for it (no wake, freeze or sleep),
   *  begun now as wake() begins it (its cgroup write made before this turn of the event loop
   *  ends); undefined for any other server (the caller takes wake()'s usual path). */
  thawIfDozing(id: string): Promise<void> | undefined {
    if (!this.dozing.has(id) || this.resting(id) || !this.thawAllowed(id)) return undefined;
    return this.wake(id);
  }

  /** Whether a thaw of the server now would make its cgroup write before thawIfDozing returns
   *  (the runtime has nothing else queued for it). */
  thawsAtOnce(id: string): boolean {
    return this.opts.runtime.thawsAtOnce?.(id) ?? true;
  }

  /** Which doze the server is in (a number new at each doze); undefined when it does not doze. */
  dozeOf(id: string): number | undefined {
    return this.isDozing(id) ? this.dozing.get(id)!.seq : undefined;
  }

  /** Called once a server dozes (frozen), with the number of that doze (dozeOf). */
  onDoze(fn: (id: string, doze: number) => void): void {
    this.dozeListeners.push(fn);
  }

  /** Whether the thaw check lets `id` thaw now (a refusal is told by wake(), which throws it). */
  private thawAllowed(id: string): boolean {
    try {
      this.opts.mayThaw?.(id);
      return true;
    } catch {
      return false;
    }
  }

  private async thaw(id: string): Promise<void> {
    this.opts.mayThaw?.(id);
    const t0 = performance.now();
    this.thaws++;
    await this.opts.runtime.thaw!(id).catch((err: unknown) => {
      metrics.woke(0, false);
      throw err;
    });
    this.dozing.delete(id);
    const ms = performance.now() - t0;
    // told once the request that asked for the thaw has had its answer (a log line is a write)
    setTimeout(() => {
      metrics.woke(ms / 1000, true);
      this.opts.log.info('server thawed', { server: id, ms: Math.round(ms * 100) / 100 });
    }, THAW_REPORT_DELAY_MS).unref();
  }

  /** The state to show: the runtime's, `sleeping` while it dozes, `waking` while a wake is under
   *  way, which lasts for a running server until its app answers when a caller said it waits for that. */
  state(id: string): ServerState | undefined {
    const s = this.opts.runtime.get(id)?.state;
    if (s === undefined) return undefined;
    if (this.waking.has(id) || (s === 'running' && this.starting.has(id))) return 'waking';
    return s === 'running' && this.dozing.has(id) ? 'sleeping' : s;
  }

  /** Whether the server dozes now (frozen, memory kept). */
  isDozing(id: string): boolean {
    return this.dozing.has(id) && !this.waking.has(id);
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

  /** Whether anything holds the server awake right now (work under way, or an open connection). */
  busy(id: string): boolean {
    return this.activity.held(id) || this.activity.connected(id);
  }

  private resting(id: string): boolean {
    return this.waking.has(id) || this.sleeping.has(id) || this.freezing.has(id);
  }

  /** One pass: every running server idle for idleTimeout, not held, not never_sleep, dozes (or
   *  sleeps); a server dozing for dozeTimeout with no open connection sleeps. */
  check(): void {
    const now = this.now();
    const seen = new Set<string>();
    for (const s of this.opts.runtime.list()) {
      seen.add(s.id);
      if (s.state !== 'running') {
        if (!this.resting(s.id)) this.dozing.delete(s.id); // stopped by someone else
        continue;
      }
      this.activity.probe(s.id);
      const last = this.activity.lastAt(s.id);
      if (last === undefined) {
        this.activity.markAt(s.id, now); // first seen (created, or running at boot): its idle time starts now
        continue;
      }
      if (this.activity.held(s.id) || this.resting(s.id)) continue;
      const doze = this.dozing.get(s.id);
      if (doze) {
        if (this.opts.neverSleep(s.id))
          this.touch(s.id); // made never_sleep while it dozed
        else if (now - doze.since >= (this.opts.dozeTimeout ?? 0) && !this.activity.connected(s.id)) this.sleep(s.id, now - last, 'doze timeout');
        continue;
      }
      if (now - last < this.opts.idleTimeout) continue;
      if (this.opts.neverSleep(s.id)) continue;
      if (this.dozeOn) this.doze(s.id, now - last);
      else if (!this.activity.connected(s.id)) this.sleep(s.id, now - last, 'idle');
    }
    this.activity.prune(seen);
    for (const id of this.dozing.keys()) if (!seen.has(id)) this.dozing.delete(id);
  }

  private doze(id: string, idleMs: number): void {
    const p = (async () => {
      try {
        const { memoryBytes, anonBytes } = await this.opts.runtime.freeze!(id);
        const seq = ++this.dozeSeq;
        this.dozing.set(id, { since: this.now(), seq, memoryBytes: anonBytes ?? memoryBytes });
        this.dozes++;
        for (const fn of this.dozeListeners) fn(id, seq);
        this.opts.log.info('server dozes', { server: id, idleMs, memoryBytes, anonBytes });
        metrics.slept();
      } catch (err) {
        this.opts.log.error('could not freeze a server', { server: id, err });
      }
    })().finally(() => this.freezing.delete(id));
    this.freezing.set(id, p);
  }

  /** Stops dozing servers, LRU first, while host available memory is below the floor; when no
   *  dozing server is left to stop, removes parked containers of sleeping servers (unparkFloor). */
  checkFloor(): void {
    const reading = this.floor.reading();
    const { missing } = reading;
    if (missing <= 0) return;
    const dozers = [];
    for (const [id, d] of this.dozing)
      if (!this.resting(id) && !this.floor.isReleasing(id))
        dozers.push({ id, last: this.activity.lastAt(id) ?? 0, memoryBytes: d.memoryBytes, connected: this.activity.connected(id) });
    const stopping = victims(dozers, missing);
    if (stopping.length) this.opts.log.info('memory floor: dozing servers stop', { servers: stopping, ...reading });
    for (const id of stopping) this.sleep(id, this.now() - (this.activity.lastAt(id) ?? 0), 'memory floor');
    if (stopping.length === dozers.length && this.sleeping.size === 0) this.floor.unpark(missing);
  }

  /** The memory floor from now on (bytes; 0: none): checked from the next floor check on. */
  setMemoryFloor(bytes: number): void {
    this.floor.bytes = bytes;
    if (this.timer) this.armFloor();
  }

  /** The floor check runs while there is a floor and something it can free (dozing or parked servers). */
  private armFloor(): void {
    if ((this.dozeOn || this.opts.runtime.parked) && this.floor.bytes > 0) {
      this.floorTimer ??= setInterval(() => this.checkFloor(), this.opts.floorInterval ?? 500);
      this.floorTimer.unref();
    } else {
      clearInterval(this.floorTimer);
      this.floorTimer = undefined;
    }
  }

  private sleep(id: string, idleMs: number, why: string): void {
    const dozed = this.dozing.get(id);
    const release = dozed && this.floor.stopping(id, dozed.memoryBytes);
    const p = (async () => {
      try {
        await this.opts.runtime.stop(id, { park: why !== 'memory floor' }); // no parked init for memory the host is short of
        this.opts.log.info('server sleeps', { server: id, idleMs, why });
        if (!dozed) metrics.slept();
        for (const fn of this.sleepListeners) fn(id);
        if (release) this.floor.stopped(release);
      } catch (err) {
        this.opts.log.error('could not put server to sleep', { server: id, err });
        this.floor.failed(id, release);
      }
    })().finally(() => {
      this.dozing.delete(id);
      this.sleeping.delete(id);
    });
    this.sleeping.set(id, p);
  }

  forget(id: string): void {
    this.activity.forget(id);
    this.dozing.delete(id);
    this.floor.forget(id);
  }

  /** Servers frozen before this tracker began (a doze of a daemon before this one) are dozing:
   *  idle from now, their doze timeout counted from now (with doze off: stopped at the next check). */
  private adoptFrozen(): void {
    const rt = this.opts.runtime;
    if (!rt.frozen || !rt.thaw) return;
    const now = this.now();
    for (const s of rt.list()) {
      if (s.state !== 'running' || this.dozing.has(s.id) || this.resting(s.id)) continue;
      const f = rt.frozen(s.id);
      if (!f) continue;
      const seq = ++this.dozeSeq;
      this.dozing.set(s.id, { since: now, seq, memoryBytes: f.anonBytes ?? f.memoryBytes });
      for (const fn of this.dozeListeners) fn(s.id, seq);
      this.activity.markAt(s.id, now);
      this.opts.log.info('server dozes (frozen before this start)', { server: s.id, memoryBytes: f.memoryBytes, anonBytes: f.anonBytes });
    }
  }

  start(): void {
    if (!this.timer) this.adoptFrozen();
    this.timer ??= setInterval(() => this.check(), this.opts.checkInterval);
    this.timer.unref();
    this.armFloor();
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.floorTimer);
    this.timer = undefined;
    this.floorTimer = undefined;
  }
}
