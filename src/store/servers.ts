// Server records as the hosting API sees them: owner, slug, SSH public key, tier limits and
// flags. Secondary indexes (slug → id, SSH key fingerprint → id) are written in the same
// transaction as the record. This is the one record of a server's limits (memory, disk): they
// are written at insert and by setLimits, whose one caller is hosting (tier ceilings); flags
// (update) are also set by billing and the operator. The runtime keeps only what it owns (ip,
// uid range, desired state) in its own record (runtime.ts).
//
// A record carries `pending` while its create is not yet answered or its delete not finished:
// such a server is invisible (get, bySlug, byKeyFingerprint, listByAccount and all skip it; its
// slug stays reserved) and a restarted daemon removes it with everything it holds. Accounts made
// by an anonymous create are held the same way until that create is committed.

import type { CheckpointRecord } from './checkpoints.js';
import type { LmdbEnv } from './db.js';
import type { DomainRecord } from './domains.js';

/** Work on a server that is not acknowledged (create) or not finished (delete). A `move` is a
 *  server another host hands over (src/moves): it is not abandoned by a restart nor by its
 *  deadline but resolved by the registry's placement (here at an epoch above `expected`: it is
 *  this host's, committed; elsewhere: removed), since the registry may name this host already. */
export interface PendingOp {
  op: 'create' | 'delete' | 'move';
  /** Instance id of the daemon doing it; pending work of another instance is abandoned. */
  by: string;
  /** Epoch ms after which even that daemon treats it as abandoned (a move: resolved by the registry instead). */
  until: number;
  /** A move: the placement's epoch the source read (the target takes it from there, one more). */
  expected?: number;
}

/** What a server moved here takes over from its source once it is this host's (src/moves):
 *  written with its record, in the same transaction, kept through the commit and cleared once
 *  done, so a crash after the commit loses none of it (finished at the next start). */
export interface MoveTakeover {
  /** The host it came from (a recovery: the dead host). */
  from: string;
  /** The checkpoint its disk is made from (made again from it when a crash lost the disk). */
  checkpoint: string;
  /** Whether it ran on the source: started here once placed here. */
  running: boolean;
  /** Container ports exposed again here. */
  exposed: number[];
  /** Its checkpoint records and own domains' records as the source had them. */
  checkpoints: CheckpointRecord[];
  domains: DomainRecord[];
  /** A recovery's word to its owner (rootbox.log). */
  note?: string;
  /** The instant (ms) the source charged it up to: metered here from there (absent: a recovery, from its commit). */
  meteredTo?: number;
}

export interface ServerRecord {
  id: string;
  accountId: string;
  slug: string;
  /** OpenSSH public key line, e.g. `ssh-ed25519 AAAA… srv_x`. */
  sshPublicKey: string;
  /** SHA256 fingerprint of the public key blob, base64 without padding (OpenSSH style, no prefix). */
  keyFingerprint: string;
  memoryBytes: number;
  diskBytes: number;
  neverSleep: boolean;
  suspended: boolean;
  flag: string | null;
  createdAt: number;
  pending?: PendingOp;
  /** A server moved here whose takeover is not finished (MoveTakeover). */
  takeover?: MoveTakeover;
}

/** An account made by a create that is not committed yet. */
export interface AccountHold {
  accountId: string;
  by: string;
  until: number;
}

const visible = (r: ServerRecord | undefined): ServerRecord | undefined => (r && !r.pending ? r : undefined);

export class ServerStore {
  private readonly db;
  private readonly slugs;
  private readonly keys;
  private readonly byAccount;
  private readonly holds;

  /** Writes to server records so far (version). */
  private writes = 0;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<ServerRecord>('servers');
    this.slugs = env.db<string>('server_slugs');
    this.keys = env.db<string>('server_keys');
    this.byAccount = env.db<string>('server_by_account');
    this.holds = env.db<AccountHold>('account_holds');
  }

  get(id: string): ServerRecord | undefined {
    return visible(this.db.get(id));
  }

  /** Changes with every write to a server record (this daemon is the store's one writer while it
   *  runs): what a cache read from them is current while it stays the same (proxy/sites.ts). */
  version(): number {
    return this.writes;
  }

  /** The record whether committed or pending. */
  getAny(id: string): ServerRecord | undefined {
    return this.db.get(id);
  }

  bySlug(slug: string): ServerRecord | undefined {
    const id = this.slugs.get(slug);
    return id ? visible(this.db.get(id)) : undefined;
  }

  byKeyFingerprint(fp: string): ServerRecord | undefined {
    const id = this.keys.get(fp);
    return id ? visible(this.db.get(id)) : undefined;
  }

  /** Committed servers of an account; with `withPending` also those being created or deleted. */
  listByAccount(accountId: string, o: { withPending?: boolean } = {}): ServerRecord[] {
    const out: ServerRecord[] = [];
    for (const { key } of this.byAccount.getRange({ start: [accountId], end: [accountId, '\uffff'] })) {
      const rec = this.db.get((key as string[])[1]);
      if (rec && (o.withPending || !rec.pending)) out.push(rec);
    }
    return out;
  }

  all(o: { withPending?: boolean } = {}): ServerRecord[] {
    const out: ServerRecord[] = [];
    for (const { value } of this.db.getRange()) if (o.withPending || !value.pending) out.push(value);
    return out;
  }

  pendingAll(): ServerRecord[] {
    return this.all({ withPending: true }).filter((r) => r.pending);
  }

  /** Inserts a new record (pending or not); false (and nothing written) when its slug is taken. */
  insert(rec: ServerRecord): boolean {
    this.writes++;
    return this.env.txSync(() => {
      if (this.slugs.get(rec.slug) !== undefined) return false;
      this.db.putSync(rec.id, rec);
      this.slugs.putSync(rec.slug, rec.id);
      this.keys.putSync(rec.keyFingerprint, rec.id);
      this.byAccount.putSync([rec.accountId, rec.id], rec.id);
      return true;
    });
  }

  /** Ends a pending create: the server becomes visible. False when the record is gone, is not
   *  a pending create, or its deadline passed (it counts as abandoned then). A move has no
   *  deadline here: it commits once the registry placed it here (its caller read that). */
  commit(id: string, now = Date.now()): boolean {
    this.writes++;
    return this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec?.pending || rec.pending.op === 'delete' || (rec.pending.op === 'create' && rec.pending.until < now)) return false;
      const { pending: _, ...done } = rec;
      this.db.putSync(id, done);
      return true;
    });
  }

  /** Marks a server as being deleted (invisible from now on); the record as it was, or undefined. */
  markDeleting(id: string, by: string, until: number): ServerRecord | undefined {
    this.writes++;
    return this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return undefined;
      this.db.putSync(id, { ...rec, pending: { op: 'delete', by, until } });
      return rec;
    });
  }

  /** Changes a record's flags (slug, key and owner are fixed for a server's life; limits are
   *  setLimits'). */
  update(id: string, change: (rec: ServerRecord) => Partial<Pick<ServerRecord, 'neverSleep' | 'suspended' | 'flag'>>): ServerRecord | undefined {
    this.writes++;
    return this.env.patch<ServerRecord>(this.db, id, change);
  }

  /** A moved server's takeover done (MoveTakeover): its mark goes. */
  takeoverDone(id: string): void {
    this.writes++;
    this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec?.takeover) return;
      const { takeover: _, ...done } = rec;
      this.db.putSync(id, done);
    });
  }

  /** Records the memory and disk ceilings the server now has (hosting's tier keeping). */
  setLimits(id: string, limits: Pick<ServerRecord, 'memoryBytes' | 'diskBytes'>): ServerRecord | undefined {
    this.writes++;
    const { memoryBytes, diskBytes } = limits;
    return this.env.patch<ServerRecord>(this.db, id, () => ({ memoryBytes, diskBytes }));
  }

  remove(id: string): void {
    this.writes++;
    this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return;
      this.db.removeSync(id);
      if (this.slugs.get(rec.slug) === id) this.slugs.removeSync(rec.slug);
      if (this.keys.get(rec.keyFingerprint) === id) this.keys.removeSync(rec.keyFingerprint);
      this.byAccount.removeSync([rec.accountId, rec.id]);
    });
  }

  /** Holds an account made by a create until that create commits (same transaction as the
   *  account when called inside Store.atomically). */
  hold(accountId: string, by: string, until: number): void {
    this.env.txSync(() => this.holds.putSync(accountId, { accountId, by, until }));
  }

  releaseHold(accountId: string): void {
    this.env.txSync(() => this.holds.removeSync(accountId));
  }

  holdsAll(): AccountHold[] {
    return [...this.holds.getRange().map(({ value }) => value)];
  }
}
