// TLS material for the HTTPS listener. Either the operator's cert/key files (watched, and
// reloaded on change or SIGHUP), or the embedded defaults: a local CA plus a wildcard
// certificate for {domain} and *.{domain}, generated once under <dataDir>/tls. Names a wildcard
// cannot cover for clients (any sub-name of a one-label domain such as `localhost`) get a leaf
// certificate minted on demand by the local CA and cached.
//
// Certificates installed at run time (ACME: the host's own under id 'host', servers' domains under
// theirs) are picked by SNI: exact name first, then `*.parent`; an unknown name gets the default.
// The lookup is a Map read (never an order, never I/O). Installing swaps the context for new
// handshakes only: open connections keep the one they negotiated. 'host' also becomes the default.

import { createSecureContext, type SecureContext } from 'node:tls';
import { existsSync, mkdirSync, readFileSync, unwatchFile, watchFile, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../log/index.js';
import { AppError } from '../errors.js';
import { createCa, issueLeaf, loadCa, type Ca } from './pki.js';

export interface TlsOptions {
  domain: string;
  dataDir: string;
  cert?: string;
  key?: string;
  log: Logger;
}

const CA_NAME = 'rootbox local CA';
const MAX_MINTED = 2000;
const HOST_ID = 'host';

export class TlsManager {
  private current!: SecureContext;
  private ca?: Ca;
  private readonly minted = new Map<string, SecureContext>();
  private readonly watched: string[] = [];
  /** Installed certificates by id, and the id serving each SNI name (exact or `*.parent`). */
  private readonly installed = new Map<string, { names: string[]; ctx: SecureContext }>();
  private readonly byName = new Map<string, SecureContext>();
  private fallback?: SecureContext;
  /** Where the local CA certificate is, when the embedded defaults are in use. */
  readonly caFile?: string;

  constructor(private readonly opts: TlsOptions) {
    if (opts.cert || opts.key) {
      if (!opts.cert || !opts.key) {
        throw AppError.of('config_invalid', 'config keys `https.cert` and `https.key` must be set together');
      }
      this.loadFiles();
      for (const f of [opts.cert, opts.key]) {
        watchFile(f, { interval: 2000 }, () => this.reload());
        this.watched.push(f);
      }
    } else {
      this.caFile = this.ensureGenerated();
    }
  }

  private loadFiles(): void {
    try {
      const ctx = createSecureContext({ cert: readFileSync(this.opts.cert!), key: readFileSync(this.opts.key!) });
      if (this.installed?.has(HOST_ID)) this.fallback = ctx;
      else this.current = ctx;
    } catch (e) {
      throw AppError.of('tls_invalid', `cannot load TLS cert ${this.opts.cert} / key ${this.opts.key}: ${(e as Error).message}`);
    }
  }

  private ensureGenerated(): string {
    const dir = join(this.opts.dataDir, 'tls');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const f = (n: string) => join(dir, n);
    if (!existsSync(f('ca.pem')) || !existsSync(f('ca-key.pem'))) {
      const ca = createCa(CA_NAME);
      writeFileSync(f('ca-key.pem'), ca.keyPem, { mode: 0o600 });
      writeFileSync(f('ca.pem'), ca.certPem, { mode: 0o644 });
      this.opts.log.info('generated a local certificate authority; trust it to reach rootbox over HTTPS', { ca: f('ca.pem') });
    }
    this.ca = loadCa(readFileSync(f('ca.pem'), 'utf8'), readFileSync(f('ca-key.pem'), 'utf8'), CA_NAME);
    const stamp = f('cert.domain');
    if (!existsSync(f('cert.pem')) || !existsSync(stamp) || readFileSync(stamp, 'utf8') !== this.opts.domain) {
      const leaf = issueLeaf(this.ca, [this.opts.domain, `*.${this.opts.domain}`]);
      writeFileSync(f('key.pem'), leaf.keyPem, { mode: 0o600 });
      writeFileSync(f('cert.pem'), leaf.certPem);
      writeFileSync(stamp, this.opts.domain);
    }
    this.current = createSecureContext({ cert: readFileSync(f('cert.pem')), key: readFileSync(f('key.pem')) });
    return f('ca.pem');
  }

  /** Re-reads the operator's files; keeps the old context when the new files are bad. */
  reload(): void {
    if (!this.opts.cert) return;
    try {
      this.loadFiles();
      this.opts.log.info('reloaded TLS certificate', { cert: this.opts.cert });
    } catch (e) {
      this.opts.log.error('TLS reload failed; keeping the previous certificate', { err: (e as Error).message });
    }
  }

  /** Installs (or replaces) a certificate for its names; throws when cert and key do not load. */
  install(id: string, names: string[], certPem: string, keyPem: string): void {
    const ctx = createSecureContext({ cert: certPem, key: keyPem });
    this.installed.set(id, { names: names.map((n) => n.toLowerCase()), ctx });
    if (id === HOST_ID) {
      this.fallback ??= this.current;
      this.current = ctx;
    }
    this.index();
  }

  uninstall(id: string): void {
    if (!this.installed.delete(id)) return;
    if (id === HOST_ID && this.fallback) this.current = this.fallback;
    this.index();
  }

  private index(): void {
    this.byName.clear();
    // the host's names first, so a server's own certificate for a name wins over the wildcard
    const ordered = [...this.installed].sort(([a], [b]) => (a === HOST_ID ? -1 : b === HOST_ID ? 1 : 0));
    for (const [, { names, ctx }] of ordered) for (const n of names) this.byName.set(n, ctx);
  }

  /** The context to present for an SNI name (or the default one when the client sent none). */
  contextFor(servername: string | undefined): SecureContext {
    const name = (servername ?? '').toLowerCase().replace(/\.$/, '');
    if (this.byName.size && name) {
      const hit = this.byName.get(name) ?? this.byName.get(`*.${name.slice(name.indexOf('.') + 1)}`);
      if (hit) return hit;
    }
    const d = this.opts.domain;
    if (!this.ca || !name || name === d || d.includes('.') || !name.endsWith(`.${d}`)) return this.current;
    if (!/^[a-z0-9.-]{1,253}$/.test(name)) return this.current;
    let ctx = this.minted.get(name);
    if (!ctx) {
      const leaf = issueLeaf(this.ca, [name]);
      ctx = createSecureContext({ cert: leaf.certPem, key: leaf.keyPem });
      if (this.minted.size >= MAX_MINTED) this.minted.delete(this.minted.keys().next().value!);
      this.minted.set(name, ctx);
    }
    return ctx;
  }

  close(): void {
    for (const f of this.watched) unwatchFile(f);
  }
}
