// The runtime's records: one per server, keyed by its id, holding only what the runtime owns
// (network identity, uid range, desired state), plus the two allocation indexes (ip → id, first
// uid of a range → id). Allocation and release run in one write transaction with the record, so
// two creates never share an address or a uid range. What a server is (slug, memory and disk
// limits) is the server record's (servers.ts), written by hosting alone; the runtime is given it
// in the spec of create and resize and keeps what it applied in the server's OCI bundle.
// A record is written `pending` before anything is made on the host (hosting reserves it in the
// transaction that writes the server record) and stays so until its create is committed; a
// record being deleted is pending again. Reconcile at start tears down every pending record with
// all it holds instead of bringing it back.

import type { LmdbEnv } from './db.js';

export interface RuntimeRecord {
  id: string;
  ip: string;
  /** First host uid/gid of the server's range; container uid 0 maps to it. */
  uidBase: number;
  /** What the server should be doing; reconcile() restores it after a host reboot. */
  desired: 'running' | 'stopped';
  createdAt: number;
  /** Set (a deadline, epoch ms) while the create is not committed or a delete is under way. */
  pending?: number;
  /** Base image (`<name>-<recipe hash>`) the server was created from and keeps as its lower layer;
   *  absent on servers from before images were recorded (runtime/images.ts). */
  image?: string;
}

export interface AllocateLimits {
  uidStart: number;
  uidRanges: number;
  /** Candidate addresses in preference order (the subnet's hosts minus the gateway). */
  ips: () => Iterable<string>;
}

export const UID_RANGE = 65536;

export class RuntimeStore {
  private readonly db;
  private readonly ips;
  private readonly uids;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<RuntimeRecord>('rt_servers');
    this.ips = env.db<string>('rt_ips');
    this.uids = env.db<string>('rt_uids');
  }

  get(id: string): RuntimeRecord | undefined {
    return this.db.get(id);
  }

  all(): RuntimeRecord[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }

  /**
   * Allocates the lowest free uid range and address and writes the record, atomically.
   * Returns a reason instead when the id exists or a pool is exhausted.
   */
  allocate(rec: Omit<RuntimeRecord, 'ip' | 'uidBase'>, lim: AllocateLimits): RuntimeRecord | 'exists' | 'no_ip' | 'no_uid' {
    return this.env.txSync(() => {
      if (this.db.get(rec.id)) return 'exists';
      let uidBase = -1;
      for (let i = 0; i < lim.uidRanges; i++) {
        if (this.uids.get(lim.uidStart + i * UID_RANGE) === undefined) {
          uidBase = lim.uidStart + i * UID_RANGE;
          break;
        }
      }
      if (uidBase < 0) return 'no_uid';
      let ip: string | undefined;
      for (const cand of lim.ips()) {
        if (this.ips.get(cand) === undefined) {
          ip = cand;
          break;
        }
      }
      if (!ip) return 'no_ip';
      const full: RuntimeRecord = { ...rec, ip, uidBase };
      this.uids.putSync(uidBase, rec.id);
      this.ips.putSync(ip, rec.id);
      this.db.putSync(rec.id, full);
      return full;
    });
  }

  /** Records what the server should be doing; undefined when there is no record. */
  setDesired(id: string, desired: RuntimeRecord['desired']): RuntimeRecord | undefined {
    return this.env.patch<RuntimeRecord>(this.db, id, () => ({ desired }));
  }

  /** Ends the pending state of a created record; false when there is no record. */
  commit(id: string): boolean {
    return this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return false;
      if (rec.pending !== undefined) {
        const { pending: _, ...done } = rec;
        this.db.putSync(id, done);
      }
      return true;
    });
  }

  /** Marks a record for teardown (a delete under way): reconcile removes it instead of booting it. */
  doom(id: string, until: number): RuntimeRecord | undefined {
    return this.env.patch<RuntimeRecord>(this.db, id, () => ({ pending: until }));
  }

  /** The allocation indexes as stored: [ip, id] and [first uid, id]. */
  allocations(): { ips: [string, string][]; uids: [number, string][] } {
    return {
      ips: [...this.ips.getRange().map(({ key, value }) => [key as string, value] as [string, string])],
      uids: [...this.uids.getRange().map(({ key, value }) => [key as number, value] as [number, string])],
    };
  }

  /** Deletes the record and frees its address and uid range. */
  remove(id: string): void {
    this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return;
      this.db.removeSync(id);
      if (this.ips.get(rec.ip) === id) this.ips.removeSync(rec.ip);
      if (this.uids.get(rec.uidBase) === id) this.uids.removeSync(rec.uidBase);
    });
  }
}
