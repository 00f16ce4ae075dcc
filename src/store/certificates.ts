// TLS certificates obtained through ACME: one record per certificate, keyed by an id the owner
// chooses ('host' for {domain} + *.{domain}; a custom domain's name for its own). The record
// carries the chain, the private key (the data dir is 0700) and the names it covers; the edge
// loads them at start and picks one by SNI.

import type { LmdbEnv } from './db.js';

export interface CertificateRecord {
  id: string;
  /** DNS names the certificate covers (may include a `*.` wildcard). */
  names: string[];
  certPem: string;
  keyPem: string;
  /** ms since the epoch. */
  notAfter: number;
  issuedAt: number;
}

export class CertificateStore {
  private readonly db;
  constructor(env: LmdbEnv) {
    this.db = env.db<CertificateRecord>('certificates');
  }

  /** Synchronous and synced: a certificate that was installed survives a crash. */
  save(rec: CertificateRecord): void {
    this.db.putSync(rec.id, rec);
  }

  load(id: string): CertificateRecord | undefined {
    return this.db.get(id);
  }

  remove(id: string): boolean {
    return this.db.removeSync(id);
  }

  all(): CertificateRecord[] {
    return [...this.db.getRange().map(({ value }) => value)];
  }
}
