// Server records as the hosting API sees them: owner, slug, SSH public key, tier limits and
// flags. Secondary indexes (slug → id, SSH key fingerprint → id) are written in the same
// transaction as the record. The runtime keeps its own records (ip, uid range) elsewhere.

import type { LmdbEnv } from './db.js';

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
}

export class ServerStore {
  private readonly db;
  private readonly slugs;
  private readonly keys;
  private readonly byAccount;

  constructor(private readonly env: LmdbEnv) {
    this.db = env.db<ServerRecord>('servers');
    this.slugs = env.db<string>('server_slugs');
    this.keys = env.db<string>('server_keys');
    this.byAccount = env.db<string>('server_by_account');
  }

  get(id: string): ServerRecord | undefined {
    return this.db.get(id);
  }

  bySlug(slug: string): ServerRecord | undefined {
    const id = this.slugs.get(slug);
    return id ? this.db.get(id) : undefined;
  }

  byKeyFingerprint(fp: string): ServerRecord | undefined {
    const id = this.keys.get(fp);
    return id ? this.db.get(id) : undefined;
  }

  listByAccount(accountId: string): ServerRecord[] {
    const out: ServerRecord[] = [];
    for (const { key } of this.byAccount.getRange({ start: [accountId], end: [accountId, '\uffff'] })) {
      const rec = this.db.get((key as string[])[1]);
      if (rec) out.push(rec);
    }
    return out;
  }

  all(): ServerRecord[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }

  /** Inserts a new record; false (and nothing written) when its slug is taken. */
  insert(rec: ServerRecord): boolean {
    return this.env.txSync(() => {
      if (this.slugs.get(rec.slug) !== undefined) return false;
      this.db.putSync(rec.id, rec);
      this.slugs.putSync(rec.slug, rec.id);
      this.keys.putSync(rec.keyFingerprint, rec.id);
      this.byAccount.putSync([rec.accountId, rec.id], rec.id);
      return true;
    });
  }

  /** Applies a change to an existing record (slug and key are fixed for a server's life). */
  update(id: string, change: (rec: ServerRecord) => Partial<Pick<ServerRecord, 'memoryBytes' | 'diskBytes' | 'neverSleep' | 'suspended' | 'flag'>>): ServerRecord | undefined {
    return this.env.patch<ServerRecord>(this.db, id, change);
  }

  remove(id: string): void {
    this.env.txSync(() => {
      const rec = this.db.get(id);
      if (!rec) return;
      this.db.removeSync(id);
      this.slugs.removeSync(rec.slug);
      this.keys.removeSync(rec.keyFingerprint);
      this.byAccount.removeSync([rec.accountId, rec.id]);
    });
  }
}
