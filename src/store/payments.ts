// x402 payments as the paywall records them. One record per payment, keyed by (asset, payer,
// nonce) lowercased; `lock` is the atomic check-then-write that makes the paid work run at most
// once per payment. Payments whose settlement is under way or whose outcome is unknown are also
// indexed as pending so the reconciler finds them without a scan; `locked()` (start-up only)
// scans for the records a stopped daemon left locked. markSettling() is the pending mark made
// before a settlement is sent: in the settlement journal at once (settling.ts), in lmdb soon after.

import { join } from 'node:path';
import type { LmdbEnv } from './db.js';
import { SettlingJournal } from './settling.js';

export type PaymentStatus =
  /** Locked; paid work running. Nothing was sent for settlement yet (the record turns pending
   *  first, committed before anything is sent), so a `locked` record found after a kill was
   *  interrupted before any money could move; after a power cut it may also be one whose pending
   *  mark was not yet flushed (the paywall does not wait for that fdatasync). */
  | 'locked'
  /** The facilitator settled it. */
  | 'settled'
  /** Settlement under way (written before /settle is called or a transaction is broadcast) or its
   *  outcome unknown; finished by the reconciler. */
  | 'pending'
  /** The facilitator refused to settle it; the payer kept the money. */
  | 'refused'
  /** The paid work failed; never settled. */
  | 'abandoned'
  /** Pending until the authorization expired without a settlement. */
  | 'expired';

export interface PaymentRecord {
  asset: string;
  payer: string;
  nonce: string;
  status: PaymentStatus;
  /** What was bought, e.g. `verify` or `recharge`. */
  purpose: string;
  meta?: Record<string, string>;
  amount: string;
  network: string;
  payTo: string;
  resource: string;
  /** Unix seconds after which the authorization cannot settle any more. */
  validBefore: number;
  lockedAt: number;
  updatedAt: number;
  attempts: number;
  transaction?: string;
  reason?: string;
  /** Kept while pending: the exact /settle request to repeat (and, self-settling, the signed
   *  transaction, written before it is broadcast). */
  settle?: { payload: unknown; requirements: unknown; raw?: string };
}

export type PaymentKey = [string, string, string];

type PaymentChange = Partial<Omit<PaymentRecord, 'asset' | 'payer' | 'nonce'>>;

export const paymentKey = (asset: string, payer: string, nonce: string): PaymentKey => [asset.toLowerCase(), payer.toLowerCase(), nonce.toLowerCase()];

export class PaymentStore {
  private readonly db;
  private readonly pendingIdx;
  /** Changes updateLater() made that lmdb has not committed yet, by key: what reads answer meanwhile. */
  private readonly writing = new Map<string, PaymentRecord>();
  /** The settlement journal (settling.ts), opened by the daemon's first use (a CLI that opens the
   *  store never touches it). */
  private journalFile?: SettlingJournal<PaymentChange>;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<PaymentRecord>('payments');
    this.pendingIdx = env.db<number>('payments_pending');
  }

  private get journal(): SettlingJournal<PaymentChange> {
    return (this.journalFile ??= new SettlingJournal(join(this.env.path, 'settling.journal')));
  }

  /** The pending mark before anything is sent for settlement (`change` sets status pending with
   *  the settle request): in the settlement journal when it returns, so a kill of the process
   *  after it leaves the payment pending at the next start, and read back at once; lmdb commits
   *  it without being waited for (updateLater). */
  markSettling(key: PaymentKey, change: PaymentChange & { status: 'pending' }): Promise<PaymentRecord | undefined> {
    this.journal.compact((k) => this.db.get(k)?.status !== 'locked' && !this.writing.has(k.join(':')));
    this.journal.append({ key, change });
    return this.updateLater(key, change);
  }

  get(key: PaymentKey): PaymentRecord | undefined {
    return this.writing.get(key.join(':')) ?? this.db.get(key);
  }

  isUsed(key: PaymentKey): boolean {
    return this.get(key) !== undefined;
  }

  /** Writes the record with status `locked` unless the key exists; true when this call won. */
  lock(rec: Omit<PaymentRecord, 'status' | 'attempts' | 'updatedAt'>): boolean {
    const key = paymentKey(rec.asset, rec.payer, rec.nonce);
    return this.env.txSync(() => {
      if (this.db.get(key) !== undefined) return false;
      this.db.putSync(key, { ...rec, asset: key[0], payer: key[1], nonce: key[2], status: 'locked', attempts: 0, updatedAt: rec.lockedAt });
      return true;
    });
  }

  /** Removes a record this caller locked whose payment was then rejected (it never ran paid work). */
  unlock(key: PaymentKey): void {
    this.env.txSync(() => {
      if (this.db.get(key)?.status === 'locked') this.db.removeSync(key);
    });
  }

  /** Applies a change and keeps the pending index in step; returns the new record. */
  update(key: PaymentKey, change: PaymentChange): PaymentRecord | undefined {
    return this.env.txSync(() => this.apply(key, change));
  }

  /** update() without blocking the event loop while the disk syncs: resolves once the change is on
   *  disk (what is written before anything is sent for settlement). */
  updateDurable(key: PaymentKey, change: PaymentChange): Promise<PaymentRecord | undefined> {
    return this.committing((fn) => this.env.txDurable(fn), key, change);
  }

  /** update() for a caller that does not wait for it: every read of this store sees the change at
   *  once, and lmdb commits it in its next write (the promise: once committed). What a kill or a
   *  power cut before that commit loses, the caller must be able to lose (a settlement's outcome:
   *  the record stays pending and the reconciler finds the outcome again). */
  updateLater(key: PaymentKey, change: PaymentChange): Promise<PaymentRecord | undefined> {
    const id = key.join(':');
    const rec = this.get(key);
    if (!rec) return Promise.resolve(undefined);
    const next: PaymentRecord = { ...rec, ...change, updatedAt: change.updatedAt ?? Date.now() };
    if (next.status !== 'pending') delete next.settle;
    this.writing.set(id, next);
    return this.committing((fn) => this.env.txCommitted(fn), key, change, next).finally(() => {
      if (this.writing.get(id) === next) this.writing.delete(id);
    });
  }

  /** A change in an asynchronous lmdb transaction. Its callback runs before the commit, and until the
   *  commit lands reads still see the old record (and the old pending index), so the written record
   *  stays in `writing` until then: a reconciler pass in that window would otherwise miss a pending
   *  payment. `only`: written only while that in-flight change is still the newest. */
  private async committing(
    tx: (fn: () => PaymentRecord | undefined) => Promise<PaymentRecord | undefined>,
    key: PaymentKey,
    change: PaymentChange,
    only?: PaymentRecord,
  ): Promise<PaymentRecord | undefined> {
    const id = key.join(':');
    let wrote: PaymentRecord | undefined;
    try {
      return await tx(() => {
        if (only && this.writing.get(id) !== only) return this.get(key);
        wrote = this.apply(key, change);
        if (wrote) this.writing.set(id, wrote);
        return wrote;
      });
    } finally {
      if (wrote && this.writing.get(id) === wrote) this.writing.delete(id);
    }
  }

  /** The change inside the caller's transaction (writes inside one are part of it). A change of
   *  updateLater still in flight is part of it too: this write carries it, and that one's own
   *  commit, coming later, then writes nothing. */
  private apply(key: PaymentKey, change: PaymentChange): PaymentRecord | undefined {
    const stored = this.db.get(key);
    const rec = this.get(key);
    this.writing.delete(key.join(':'));
    if (!rec) return undefined;
    const next: PaymentRecord = { ...rec, ...change, updatedAt: change.updatedAt ?? Date.now() };
    if (next.status !== 'pending') delete next.settle;
    void this.db.put(key, next);
    if (next.status === 'pending') void this.pendingIdx.put(key, next.validBefore);
    else if (stored?.status === 'pending') void this.pendingIdx.remove(key);
    return next;
  }

  /** Every payment whose settlement outcome is still unknown, those whose pending mark or outcome
   *  lmdb has not committed yet (updateLater) included. */
  pending(): PaymentRecord[] {
    const out: PaymentRecord[] = [];
    const seen = new Set<string>();
    for (const { key } of this.pendingIdx.getRange()) {
      const rec = this.get(key as PaymentKey);
      seen.add((key as PaymentKey).join(':'));
      if (rec?.status === 'pending') out.push(rec); // not one whose outcome is being written (updateLater)
    }
    for (const [id, rec] of this.writing) if (rec.status === 'pending' && !seen.has(id)) out.push(rec);
    return out;
  }

  /** Every payment still locked (scans all records: for start-up, when no paid work can be running).
   *  First a payment the settlement journal names that lmdb still has `locked` — it may have been
   *  sent for settlement before the daemon stopped — turns pending (synced, with its settle
   *  request; the reconciler finishes it), and the journal is emptied. */
  locked(): PaymentRecord[] {
    const entries = this.journal.read();
    if (entries.length)
      this.env.txSync(() => {
        for (const e of entries) {
          const key = paymentKey(...e.key);
          if (this.db.get(key)?.status === 'locked') this.apply(key, { ...e.change, status: 'pending' });
        }
      });
    this.journal.clear();
    const out: PaymentRecord[] = [];
    for (const { value } of this.db.getRange()) if (value.status === 'locked') out.push(value);
    return out;
  }

  /** Every payment's key as the registry's payment locks name it (`asset:payer:nonce`): a box
   *  joining a cluster (registry/join.ts). */
  keys(): string[] {
    return [...this.db.getKeys()].map((k) => (k as PaymentKey).join(':'));
  }

  count(): number {
    return this.db.getCount();
  }

  close(): void {
    this.journalFile?.close();
  }
}
