// Creates and deletes as recoverable work. A create writes its server record `pending` (with a
// deadline and this daemon's instance id) before anything is made on the host, and commits it
// right before its answer; a delete marks the server first. Pending servers are invisible (API,
// SSH, subdomain). An anonymous account made by a create is held the same way until the create
// commits. At start (construction) pending work of earlier daemons is removed — the runtime's
// reconcile has already torn down what it held on the host — and held accounts are dropped; in
// a running daemon, work of its own that failed half-way is retried by sweep(). A server another
// host hands over (a `move`, src/moves) is left to the moves part: the registry may name this host
// already, so only its placement says whether it is kept or removed (never a restart or a deadline).

import { randomBytes } from 'node:crypto';
import { isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import type { AccountRecord, PendingOp, ServerRecord, Store } from '../store/index.js';

/** A create not committed by then counts as abandoned (and may no longer commit). */
export const CREATE_DEADLINE_MS = 10 * 60_000;
export const DELETE_DEADLINE_MS = 10 * 60_000;
const SWEEP_EVERY_MS = 30_000;

export interface PendingDeps {
  store: Store;
  runtime: Runtime;
  log: Logger;
  /** Closes a server's exposed ports and drops their records. */
  release(serverId: string): Promise<void>;
  /** Cluster mode: the registry forgets an account the store dropped here. */
  forgetAccount?(accountId: string): Promise<void>;
  /** Cluster mode: the registry's reservation of a server whose create will never commit goes. */
  releaseClaim?(serverId: string): Promise<void>;
}

export class PendingWork {
  /** This daemon's instance: pending work marked with another one was cut off by a crash. */
  readonly by = randomBytes(6).toString('hex');
  private readonly inFlight = new Set<string>();
  private lastSweep = 0;

  constructor(private readonly d: PendingDeps) {}

  mark(op: PendingOp['op'], now = Date.now()): PendingOp {
    return { op, by: this.by, until: now + (op === 'delete' ? DELETE_DEADLINE_MS : CREATE_DEADLINE_MS) };
  }

  /** Whether this daemon is at work on server `id`'s pending record now. */
  busy(id: string): boolean {
    return this.inFlight.has(id);
  }

  begin(id: string): void {
    this.inFlight.add(id);
  }

  end(id: string): void {
    this.inFlight.delete(id);
  }

  /** Holds an account a create made until the create commits; called in the transaction that
   *  records the account, so a crash cannot leave it unheld. */
  hold(accountId: string): void {
    this.d.store.servers.hold(accountId, this.by, Date.now() + CREATE_DEADLINE_MS);
  }

  /** Makes an account and holds it in the same transaction (single box, synchronous make). */
  holdNewAccount<T extends { account: AccountRecord }>(make: () => T): T {
    return this.d.store.atomically(() => {
      const made = make();
      this.hold(made.account.id);
      return made;
    });
  }

  /** Removes an account made by a create that did not succeed, with its hold, unless it holds
   *  a committed server or a phone (a verified account is found again by its phone). */
  dropAccount(accountId: string): boolean {
    const dropped = this.d.store.atomically(() => {
      this.d.store.servers.releaseHold(accountId);
      const acc = this.d.store.accounts.get(accountId);
      if (!acc || acc.phone || this.d.store.servers.listByAccount(accountId).length > 0) return false;
      this.d.store.accounts.remove(accountId);
      return true;
    });
    if (dropped && this.d.forgetAccount)
      void this.d.forgetAccount(accountId).catch((err) => this.d.log.warn('an account a failed create made stays in the registry', { accountId, err }));
    return dropped;
  }

  /** Drops the records of a pending server whose runtime part is gone: its exposures, itself. */
  private forget(rec: ServerRecord): void {
    this.d.store.atomically(() => {
      for (const e of this.d.store.exposures.byServer(rec.id)) this.d.store.exposures.release(e.port);
      this.d.store.servers.remove(rec.id);
    });
    if (this.d.releaseClaim)
      void this.d.releaseClaim(rec.id).catch((err) => this.d.log.warn('a reservation of an unfinished create stays until it expires', { id: rec.id, err }));
  }

  /** Finishes abandoned pending work: the runtime part (if any), exposures, the record. */
  async finish(rec: ServerRecord): Promise<void> {
    this.inFlight.add(rec.id);
    try {
      await this.d.release(rec.id);
      await this.d.runtime.delete(rec.id).catch((e) => {
        if (!(isAppError(e) && e.code === 'server_not_found')) throw e;
      });
      this.forget(rec);
      this.d.log.info(rec.pending?.op === 'delete' ? 'unfinished delete finished' : 'unacknowledged create removed', { id: rec.id, slug: rec.slug });
    } finally {
      this.inFlight.delete(rec.id);
    }
  }

  /** Start-up: removes what earlier daemons left pending. Store records go at once (before the
   *  API listens); a runtime part reconcile could not remove is deleted in the background. */
  recover(): { servers: string[]; accounts: string[] } {
    const servers: string[] = [];
    for (const rec of this.d.store.servers.pendingAll()) {
      if (rec.pending!.by === this.by || rec.pending!.op === 'move') continue;
      servers.push(rec.id);
      if (!this.d.store.runtime.get(rec.id)) this.forget(rec);
      else void this.finish(rec).catch((err) => this.d.log.error('removing an unfinished server failed; retried later', { id: rec.id, err }));
    }
    const accounts: string[] = [];
    for (const h of this.d.store.servers.holdsAll()) {
      if (h.by === this.by) continue;
      if (this.dropAccount(h.accountId)) accounts.push(h.accountId);
    }
    if (servers.length || accounts.length) this.d.log.info('removed unacknowledged work of an earlier run', { servers, accounts });
    return { servers, accounts };
  }

  /** Retries own pending work nothing is doing any more (a rollback that failed), at most every
   *  30 s; also drops holds of accounts whose create ended without committing or dropping them. */
  sweep(now = Date.now()): void {
    if (now - this.lastSweep < SWEEP_EVERY_MS) return;
    this.lastSweep = now;
    for (const rec of this.d.store.servers.pendingAll()) {
      if (this.inFlight.has(rec.id) || rec.pending!.op === 'move') continue;
      void this.finish(rec).catch((err) => this.d.log.error('removing an unfinished server failed; retried later', { id: rec.id, err }));
    }
    for (const h of this.d.store.servers.holdsAll()) if (h.until < now) this.dropAccount(h.accountId);
  }
}
