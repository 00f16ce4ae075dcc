// Parking of sleeping servers (runtime.parkOnSleep): which servers are parked and since when, the
// park at sleep time (the container made again at once and left `created` — runc's init waiting
// on exec.fifo in the server's cgroup, no user process), the wake from a parked container (only
// runc start: the fifo open), unpark (the memory floor removes a parked container) and the
// adoption of a parked container found at start-up (reconcile). The runtime (runtime.ts) owns
// the lifecycle around it: it calls park() after a stop and wake() at the start of a boot.

import { existsSync, statSync } from 'node:fs';
import type { RuntimeConfig } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { RuntimeRecord } from '../store/index.js';
import { memoryStats, removeCgroup } from './cgroup.js';
import { nsPaths, type Network } from './network.js';
import type { Runc } from './runc.js';
import { cgroupPath } from './spec.js';
import type { ServerState } from './types.js';

/** What parking needs of the runtime. */
export interface ParkHost {
  readonly deps: { cfg: RuntimeConfig; log: Logger };
  readonly runc: Runc;
  readonly net: Network;
  serverDir(id: string): string;
  serial<T>(id: string, fn: () => Promise<T>): Promise<T>;
  state(id: string): ServerState | undefined;
  /** Mounts and namespaces checked (made when missing), then runc create; init's pid. */
  createContainer(rec: RuntimeRecord): Promise<number>;
  /** Awaits `op` with `meanwhile` run beside it; the container is deleted when either fails. */
  launch<T>(rec: RuntimeRecord, op: Promise<T>, meanwhile: () => void): Promise<T>;
  /** Times one step of a start when tracing. */
  step<T>(name: string, fn: () => Promise<T>): Promise<T>;
  /** Stops and removes the server's container (no grace). */
  halt(id: string): Promise<void>;
}

export class Parking {
  /** Servers parked asleep (a `created` container waiting for its start): since when. */
  private readonly since = new Map<string, number>();

  constructor(private readonly rt: ParkHost) {}

  /** Whether the server is parked now. */
  has(id: string): boolean {
    return this.since.has(id);
  }

  /** Forgets a park (its container is being removed or started). */
  forget(id: string): void {
    this.since.delete(id);
  }

  /**
   * Parks a stopped server: its container is made now, at sleep time, and left `created`, so a
   * wake is only the fifo open and the app's start. Sleeping all the same: nothing of it is
   * billed as RAM, exec is refused, unpark() (the memory floor), resize, delete and halt remove it.
   * A failure leaves it unparked (the next wake makes the container), never a half-made one.
   */
  async park(rec: RuntimeRecord): Promise<void> {
    if (this.rt.deps.cfg.parkOnSleep !== 'on') return;
    try {
      await this.rt.createContainer(rec);
      this.since.set(rec.id, Date.now());
    } catch (err) {
      this.rt.deps.log.warn('could not park a sleeping server; it wakes cold', { server: rec.id, err });
      await this.rt.runc.delete(rec.id, true).catch(() => {});
      removeCgroup(cgroupPath(this.rt.deps.cfg, rec.id));
    }
  }

  /** Parked servers: since when, and the memory their waiting init holds (its cgroup). */
  list(): { id: string; since: number; memoryBytes: number }[] {
    return [...this.since].map(([id, since]) => ({ id, since, memoryBytes: memoryStats(cgroupPath(this.rt.deps.cfg, id)).memoryBytes }));
  }

  /** A parked server's container and cgroup removed (it stays asleep and wakes cold); false when
   *  it was not parked (woken, deleted) by the time its turn came. */
  unpark(id: string): Promise<boolean> {
    return this.rt.serial(id, async () => {
      if (!this.since.has(id) || this.rt.state(id) !== 'sleeping') return false;
      await this.rt.halt(id);
      return true;
    });
  }

  /** Adopts a `created` container found at start-up as parked (reconcile). */
  adopt(id: string): void {
    this.since.set(id, Date.now());
  }

  /** The wake of a parked server: its container's start (files only are read to find it: a
   *  parked wake spawns nothing but runc start). `started` when it runs; otherwise a cold start
   *  follows, and `ran` says whether `meanwhile` already ran (a parked start that failed after it). */
  async wake(rec: RuntimeRecord, meanwhile: () => void): Promise<{ started: boolean; ran: boolean }> {
    this.since.delete(rec.id);
    const parked = this.rt.runc.createdInit(rec.id);
    if (!parked || !this.inKeptNamespaces(rec, parked)) return { started: false, ran: false };
    let ran = false;
    try {
      await this.rt.launch(
        rec,
        this.rt.step('runc start (parked)', () => this.rt.runc.start(rec.id, parked)),
        () => (meanwhile(), (ran = true)),
      );
      return { started: true, ran };
    } catch (err) {
      if (!ran) throw err;
      this.rt.deps.log.warn('a parked container did not start; making it anew', { server: rec.id, err });
      return { started: false, ran };
    }
  }

  /** Whether a parked init is in the server's pinned namespaces and its veth is there (a few
   *  stats): if not (pins remade, a veth lost), the parked container is dropped and made anew. */
  private inKeptNamespaces(rec: RuntimeRecord, pid: number): boolean {
    const ns = nsPaths(this.rt.serverDir(rec.id));
    try {
      const same = (t: 'net' | 'user') => {
        const a = statSync(`/proc/${pid}/ns/${t}`);
        const b = statSync(ns[t]);
        return a.ino === b.ino && a.dev === b.dev;
      };
      return same('net') && same('user') && existsSync(`/sys/class/net/${this.rt.net.vethOf(rec.ip)}`);
    } catch {
      return false;
    }
  }
}
