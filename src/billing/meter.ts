// Metering: every interval, each server's period since its cursor is measured and charged —
// RAM GB-hours from the memory in use while awake, disk GB-months from disk used, checkpoint
// GB-months from the bytes its checkpoints stored (storedCheckpointBytes), egress GB from the
// nftables counter plus bytes the daemon itself sent for it (proxy, exposed ports).
// The charge and the cursor move commit together (the MoneyBook: store/billing.ts on a single box,
// the registry's outbox in cluster mode), so it is exactly once.
// A server that moves between hosts (issue 38) is charged by one host at a time, with no time
// between: the host it leaves charges it up to the hand-off and then no more (handOff), the host
// it goes to meters it from that instant (takeOver); a host meters no server the registry places
// on another host (`owns`: a returning host's stale copy, before it is removed).

import type { Logger } from '../log/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import type { AccountRecord, Grant, ServerRecord, Store } from '../store/index.js';
import type { MoneyBook } from './book.js';
import { storedCheckpointBytes } from './stored.js';

export interface UsageSample {
  awake: boolean;
  memoryBytes: number;
  diskUsedBytes: number;
  /** Cumulative egress counter of the server's network (nftables). */
  egressBytes: number;
}

/** Where the meter reads a server's current usage (the runtime in production). */
export type UsageSource = (serverId: string) => Promise<UsageSample | undefined>;

/** The daemon's usage source: the runtime's stats, awake only while the server truly runs
 *  (presence: a server still waking is not billed for RAM yet, a dozing one not at all) and its
 *  processes are not frozen (the freezer, read at every charge: a doze a crash interrupted, or
 *  one the tracker does not know of, is not billed as awake); undefined for a server the
 *  runtime does not know. */
export function runtimeUsage(runtime: Pick<Runtime, 'get' | 'stats' | 'frozen'>, presence: { state(id: string): ServerState | undefined }): UsageSource {
  return async (id) => {
    if (!runtime.get(id)) return undefined;
    const s = await runtime.stats(id);
    return {
      awake: (presence.state(id) ?? runtime.get(id)?.state) === 'running' && !runtime.frozen?.(id),
      memoryBytes: s.memoryBytes,
      diskUsedBytes: s.diskUsedBytes,
      egressBytes: s.egressBytes,
    };
  };
}

const GB = 1024 ** 3;
const HOUR = 3_600_000;
const MONTH_HOURS = 730;

/** How far the instant a moved server's previous host charged it up to may be from this host's
 *  clock and still be taken as its start here (farther: a clock that is wrong, now is taken). */
const HANDOFF_SKEW_MS = 10 * 60_000;

export class Meter {
  /** Bytes sent for a server by the daemon (proxy, exposed ports) since its last charge. */
  private readonly extraEgress = new Map<string, number>();
  /** Servers whose move off this host is under way: charged up to the hand-off, not here since. */
  private readonly away = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly source: UsageSource,
    private readonly book: Pick<MoneyBook, 'charge'>,
    private readonly grant: (a: AccountRecord | undefined) => Grant,
    private readonly log: Logger,
    /** Cluster mode: false for a server the registry places on another host (not metered here). */
    private readonly owns: (serverId: string) => boolean = () => true,
  ) {}

  /** Bytes the daemon wrote to clients for a server (counted where they were written). */
  addEgress(serverId: string, bytes: number): void {
    if (!(bytes > 0) || !Number.isFinite(bytes)) return; // a bad count must not poison the bill (NaN)
    this.extraEgress.set(serverId, (this.extraEgress.get(serverId) ?? 0) + bytes);
  }

  /** At a start in cluster mode: every server's period opens again at `now`, so the time this
   *  host was not running (dead, its lease run out, its servers shown unavailable) is never
   *  charged by the first pass after it (RAM and disk are priced by the time since the cursor).
   *  The egress counter's cursor stays: bytes that left meanwhile are charged once. A clean stop
   *  charged up to the stop (Billing.stop); after a crash, what ran between the last pass and the
   *  crash (under one interval) goes uncharged. */
  resume(now: number): number {
    let n = 0;
    for (const server of this.store.servers.all()) {
      const cur = this.store.billing.cursor(server.id);
      if (!cur || cur.at >= now) continue;
      this.store.billing.startMeter(server.id, now, cur.egress);
      n++;
    }
    return n;
  }

  /** A move of the server off this host: its period up to `at` is charged now, however short
   *  (with the egress counted so far), and it is metered here no more until handedOff. */
  async handOff(server: ServerRecord, at: number): Promise<void> {
    this.away.add(server.id);
    // a pass already under way may charge first (up to its own instant): then the rest, up to `at`
    for (let i = 0; i < 3; i++) {
      const cur = this.store.billing.cursor(server.id);
      if (cur && cur.at >= at) return;
      await this.meterOne(server, at, 0);
    }
  }

  /** The move ended: moved, this host's meter of the server goes (its next host charges from the
   *  hand-off); not moved, it is metered here again from the hand-off on. */
  handedOff(serverId: string, moved: boolean): void {
    this.away.delete(serverId);
    if (!moved) return;
    this.store.billing.stopMeter(serverId);
    this.extraEgress.delete(serverId);
  }

  /** A server made here by a move or a recovery: metered from `from` (the instant its previous
   *  host charged it up to), else from `now`; its network here is new, its egress counter from 0.
   *  A meter this host kept of it from an earlier stay is replaced. */
  takeOver(serverId: string, now: number, from?: number): void {
    const at = from !== undefined && Math.abs(from - now) <= HANDOFF_SKEW_MS ? from : now;
    this.extraEgress.delete(serverId);
    this.store.billing.startMeter(serverId, at, 0);
  }

  /** Charges every server whose period since its cursor is at least `minPeriodMs` long. */
  async tick(now: number, minPeriodMs: number): Promise<number> {
    let charged = 0;
    for (const server of this.store.servers.all()) {
      if (this.away.has(server.id) || !this.owns(server.id)) continue;
      try {
        if (await this.meterOne(server, now, minPeriodMs)) charged++;
      } catch (e) {
        this.log.warn('metering failed for a server', { id: server.id, err: (e as Error).message });
      }
    }
    return charged;
  }

  private async meterOne(server: ServerRecord, now: number, minPeriodMs: number): Promise<boolean> {
    const sample = await this.source(server.id);
    const cur = this.store.billing.cursor(server.id);
    if (!cur) {
      this.store.billing.startMeter(server.id, now, sample?.egressBytes ?? 0);
      return false;
    }
    if (now - cur.at < minPeriodMs || !sample) return false;
    const hours = (now - cur.at) / HOUR;
    const extra = this.extraEgress.get(server.id) ?? 0;
    const counted = sample.egressBytes >= cur.egress ? sample.egressBytes - cur.egress : sample.egressBytes;
    this.extraEgress.delete(server.id);
    const ok = this.book.charge(
      {
        accountId: server.accountId,
        serverId: server.id,
        from: cur.at,
        to: now,
        ramGbHours: sample.awake ? (sample.memoryBytes / GB) * hours : 0,
        diskGbMonths: (sample.diskUsedBytes / GB) * (hours / MONTH_HOURS),
        checkpointGbMonths: (storedCheckpointBytes(this.store, server.id) / GB) * (hours / MONTH_HOURS),
        egressGb: (counted + extra) / GB,
      },
      sample.egressBytes,
      this.grant,
    );
    if (!ok) this.addEgress(server.id, extra);
    return ok;
  }
}
