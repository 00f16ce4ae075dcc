// The memory floor's bookkeeping over time (floor.ts picks the servers): how much memory is
// missing below `memoryFloor`, the memory of stopped dozing servers still on its way back to the
// host — counted while the stop runs and, once done, until MemAvailable has risen by it or
// `floorSettle` has passed, so one shortfall stops one server — and the removal of parked
// containers, least recently parked first, once no dozing server is left to stop.

import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import { hostMemAvailable, victims } from './floor.js';

export interface FloorOptions {
  runtime: Pick<Runtime, 'parked' | 'unpark'>;
  memoryFloor?: number;
  memAvailable?: () => number;
  floorSettle?: number;
  log: Logger;
  now: () => number;
}

/** A stopped dozing server's memory on its way back to the host. */
export interface Release {
  bytes: number;
  /** Host MemAvailable when its stop began. */
  availAtStop: number;
  /** Epoch ms when its stop finished (undefined while stopping). */
  doneAt?: number;
}

export class MemoryFloor {
  private readonly releasing = new Map<string, Release>();
  private unparking = false;

  constructor(private readonly opts: FloorOptions) {}

  /** Bytes missing below the floor, less what stops already give back (not asked twice); 0 without a floor. */
  missing(): number {
    return this.reading().missing;
  }

  /** The floor's reading now: the floor, host available memory, memory of stops still coming
   *  back, and what is missing after it (0 without a floor; the floor stop's log line tells it). */
  reading(): { floor: number; avail: number; coming: number; missing: number } {
    const floor = this.bytes;
    if (!(floor > 0)) return { floor: 0, avail: Infinity, coming: 0, missing: 0 };
    const avail = this.memAvailable();
    const coming = this.coming(avail);
    return { floor, avail, coming, missing: floor - avail - coming };
  }

  /** The floor (bytes; 0: none). */
  get bytes(): number {
    return this.opts.memoryFloor ?? 0;
  }

  set bytes(floor: number) {
    this.opts.memoryFloor = floor;
  }

  /** Whether the server's stop is still giving memory back. */
  isReleasing(id: string): boolean {
    return this.releasing.has(id);
  }

  /** A dozing server's stop begins: its `bytes` count as coming back from now. */
  stopping(id: string, bytes: number): Release {
    const release: Release = { bytes, availAtStop: this.memAvailable() };
    this.releasing.set(id, release);
    return release;
  }

  /** The stop finished: the settle window starts. */
  stopped(release: Release): void {
    release.doneAt = this.opts.now();
  }

  /** The stop failed: nothing comes back. */
  failed(id: string, release: Release | undefined): void {
    if (this.releasing.get(id) === release) this.releasing.delete(id);
  }

  forget(id: string): void {
    this.releasing.delete(id);
  }

  private memAvailable(): number {
    return (this.opts.memAvailable ?? hostMemAvailable)();
  }

  /** Memory of stopped dozing servers still coming back: counted while the stop runs and, once
   *  done, until MemAvailable has risen by it or the settle window has passed (the kernel shows
   *  freed pages in MemAvailable only some hundred ms after the processes are gone). */
  private coming(avail: number): number {
    const settle = this.opts.floorSettle ?? 1500;
    const now = this.opts.now();
    let expected = 0;
    let base = -Infinity;
    for (const [id, r] of this.releasing) {
      if (r.doneAt !== undefined && now - r.doneAt >= settle) this.releasing.delete(id);
      else {
        expected += r.bytes;
        base = Math.max(base, r.availAtStop); // the latest stop's baseline: a rise counts only once it is past it
      }
    }
    if (!expected) return 0;
    const risen = Math.max(0, avail - base);
    if (risen >= expected) {
      for (const [id, r] of this.releasing) if (r.doneAt !== undefined) this.releasing.delete(id); // all shown: nothing more to wait for
      return 0;
    }
    return expected - risen;
  }

  /** Parked containers removed, least recently parked first, as many as `missing` bytes need. */
  unpark(missing: number): void {
    const rt = this.opts.runtime;
    if (!rt.parked || !rt.unpark || this.unparking || missing <= 0) return;
    const parked = rt.parked().map((p) => ({ id: p.id, last: p.since, memoryBytes: p.memoryBytes, connected: false }));
    const ids = victims(parked, missing);
    if (!ids.length) return;
    this.unparking = true;
    void (async () => {
      for (const id of ids) {
        const freed = await rt.unpark!(id).catch((err: unknown) => (this.opts.log.error('could not unpark a server', { server: id, err }), false));
        if (freed) this.opts.log.info('parked server unparked', { server: id, why: 'memory floor' });
      }
    })().finally(() => (this.unparking = false));
  }
}
