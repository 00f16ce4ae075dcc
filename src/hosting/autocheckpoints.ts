// Automatic checkpoints (issue 37 item 3): a server that wrote to its disk since its newest
// checkpoint gets one when it goes to sleep — so a sleeping server's newest checkpoint holds all
// it wrote — and every checkpoints.interval while it runs. The newest checkpoints.keep automatic
// ones are kept (manual ones stay until deleted); every checkpoints.gcInterval the collector
// removes the chunks no checkpoint references any more. One automatic checkpoint at a time on the
// host (the disk copies share its disk); a failed one is retried with back-off (30 s doubling to
// 15 min), its server never held for it. A store that answers store_unavailable backs off the
// whole host: until its wait is over no server's checkpoint is tried (they wait in the backlog),
// so an unreachable store costs one attempt per wait, not one per server. The backlog is the
// gauge rootbox_checkpoint_backlog. Time comes from the injected clock; tick() and collect() are
// what the timers call (tests call them directly).

import type { Clock, Timer } from '../clock.js';
import { isAppError } from '../errors.js';
import { metrics } from '../metrics/index.js';
import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import type { ServerRecord, Store } from '../store/index.js';
import type { ServerCheckpoints } from './checkpoints.js';

const FIRST_RETRY_MS = 30_000;
const MAX_RETRY_MS = 15 * 60_000;

export interface AutoSettings {
  /** ms between automatic checkpoints of a running server; 0: none. */
  interval: number;
  keep: number;
  /** ms between collections; 0: none. */
  gcInterval: number;
}

export interface AutoDeps {
  store: Store;
  runtime: Pick<Runtime, 'get'>;
  checkpoints: ServerCheckpoints;
  log: Logger;
  clock: Clock;
  settings: AutoSettings;
}

export class AutoCheckpoints {
  private queue: Promise<void> = Promise.resolve();
  private readonly queued = new Set<string>();
  /** Servers whose last automatic checkpoint failed: when to try again, and the wait after that. */
  private readonly retry = new Map<string, { at: number; wait: number }>();
  private readonly timers: Timer[] = [];
  /** The store answered store_unavailable: no attempt before `until`; `wait` doubles at each failure. */
  private storeAway?: { until: number; wait: number };
  private unregister?: () => void;
  /** When start() ran: the checkpoints of earlier runs are the ones the reconcile fixes. */
  private startedAt = 0;
  /** The collection start() began (tests wait for it). */
  collecting?: Promise<void>;

  constructor(private readonly d: AutoDeps) {}

  start(): void {
    const s = this.d.settings;
    this.startedAt = this.d.checkpoints.engine.engine.now(); // the clock manifests are dated by
    this.collecting = this.collect(s.gcInterval > 0); // gcInterval 0: no collection, ever
    if (s.interval > 0) this.timers.push(this.d.clock.every(s.interval, () => void this.tick()));
    if (s.gcInterval > 0) this.timers.push(this.d.clock.every(s.gcInterval, () => void this.collect()));
    this.unregister ??= metrics.checkpointBacklog(() => this.backlog());
  }

  stop(): void {
    for (const t of this.timers.splice(0)) t.cancel();
    this.unregister?.();
    this.unregister = undefined;
  }

  /** Servers waiting for an automatic checkpoint (failed ones included): the backlog. */
  backlog(): number {
    return new Set([...this.queued, ...this.retry.keys()]).size;
  }

  /** A server went to sleep: checkpointed if it changed (one waiting for its retry keeps waiting). */
  slept(id: string): void {
    if (this.d.settings.interval <= 0) return;
    const r = this.retry.get(id);
    if (r && r.at > this.d.clock.now()) return;
    void this.enqueue(id);
  }

  /** Every running server that changed since its newest checkpoint, every stopped one whose disk
   *  was written after it (stopped some other way than an idle sleep: an operator's stop, a
   *  suspension, a crash), and failed ones whose wait is over. */
  async tick(): Promise<void> {
    const now = this.d.clock.now();
    const due = this.d.store.servers.all().filter((s) => {
      const r = this.retry.get(s.id);
      if (r) return r.at <= now;
      return this.d.runtime.get(s.id)?.state === 'running' || this.d.checkpoints.writtenSince(s);
    });
    await Promise.all(due.map((s) => this.enqueue(s.id)));
  }

  /** The records made to match the store and the manifests of servers that no longer exist
   *  removed (checkpoints.ts reconcile), then one collection of
   *  unreferenced chunks (`sweep`): at start — what a killed run left goes now, not an interval
   *  later — and every gcInterval. */
  async collect(sweep = true): Promise<void> {
    try {
      const fixed = await this.d.checkpoints.reconcile(this.startedAt, this.d.log);
      const r = sweep ? await this.d.checkpoints.engine.collect() : { swept: false, live: 0, removed: 0, removedBytes: 0, stale: 0 };
      if (r.removed || r.stale || r.temp || fixed.adopted || fixed.dropped || fixed.orphans) this.d.log.info('checkpoint chunks collected', { ...r, ...fixed });
    } catch (err) {
      this.d.log.warn('checkpoint collection failed; tried again next time', { err });
    }
  }

  /** Queues the server's automatic checkpoint (once, however often asked); resolves when it is done. */
  enqueue(id: string): Promise<void> {
    if (this.queued.has(id)) return this.queue;
    this.queued.add(id);
    this.queue = this.queue.then(() => this.one(id)).finally(() => this.queued.delete(id));
    return this.queue;
  }

  private async one(id: string): Promise<void> {
    const rec = this.d.store.servers.get(id);
    if (!rec || rec.pending || !this.d.checkpoints.engine.available) return void this.retry.delete(id);
    if (!this.d.checkpoints.changed(rec)) return void this.retry.delete(id);
    const account = this.d.store.accounts.get(rec.accountId);
    if (!account) return;
    const now = this.d.clock.now();
    if (this.storeAway && now < this.storeAway.until) {
      // the store is away: waits in the backlog, tried once the host's wait is over
      const r = this.retry.get(id);
      return void this.retry.set(id, { at: this.storeAway.until, wait: r?.wait ?? FIRST_RETRY_MS / 2 });
    }
    try {
      const r = await this.d.checkpoints.take(rec, account, 'auto');
      this.retry.delete(id);
      this.storeAway = undefined;
      this.d.log.info('automatic checkpoint', { server: id, checkpoint: r.id, newBytes: r.newBytes });
      await this.prune(rec);
    } catch (err) {
      const wait = Math.min(MAX_RETRY_MS, (this.retry.get(id)?.wait ?? FIRST_RETRY_MS / 2) * 2);
      let at = this.d.clock.now() + wait;
      if (isAppError(err) && err.code === 'store_unavailable') {
        const storeWait = Math.min(MAX_RETRY_MS, (this.storeAway?.wait ?? FIRST_RETRY_MS / 2) * 2);
        this.storeAway = { until: this.d.clock.now() + storeWait, wait: storeWait };
        at = Math.max(at, this.storeAway.until);
      }
      this.retry.set(id, { at, wait });
      this.d.log.warn('automatic checkpoint failed; tried again later', { server: id, retryInMs: at - this.d.clock.now(), err });
    }
  }

  /** Deletes the automatic checkpoints past the newest `keep`. */
  private async prune(rec: ServerRecord): Promise<void> {
    const autos = this.d.checkpoints.list(rec).filter((c) => c.kind === 'auto');
    for (const old of autos.slice(this.d.settings.keep)) {
      await this.d.checkpoints.remove(rec, old.id).catch((err) => this.d.log.warn('could not delete an old automatic checkpoint', { server: rec.id, err }));
    }
  }
}
