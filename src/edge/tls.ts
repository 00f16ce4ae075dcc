// TLS material for the HTTPS listener. Either the operator's cert/key files (watched, and
// reloaded on change or SIGHUP), or the embedded defaults: a local CA plus a wildcard
// certificate for {domain} and *.{domain}, generated once under <dataDir>/tls. Names a wildcard
// cannot cover for clients (any sub-name of a one-label domain such as `localhost`) get a leaf
// certificate minted on demand by the local CA and cached. In cluster mode the local CA is the
// cluster's edge CA once the host took it (`adoptCa`, clusterca.ts): written over tls/ca.pem and
// ca-key.pem, the wildcard certificate issued again under it; a start finds it there (a CA and key
// that do not pair, or a wildcard another CA signed, as a kill between writes leaves them, are
// made again).
//
// Certificates installed at run time (ACME: the host's own under id 'host', servers' domains under
// theirs) are picked by SNI: exact name first, then `*.parent`; an unknown name gets the default.
// The lookup is a Map read (never an order, never I/O). Installing swaps the context for new
// handshakes only: open connections keep the one they negotiated. 'host' also becomes the default.

import { createPrivateKey, X509Certificate } from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';
import { existsSync, mkdirSync, readFileSync, renameSync, unwatchFile, watchFile, writeFileSync } from 'node:fs';
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

/** A CA certificate and its key, as PEM (the cluster's edge CA, or this host's local one). */
export interface CaFiles {
  name: string;
  certPem: string;
  keyPem: string;
}

/** The CN of a CA this rootbox made (its subject is O=rootbox, CN=…): the issuer its leaves name. */
const cnOf = (certPem: string) => /(?:^|\n)CN=([^\n]*)/.exec(new X509Certificate(certPem).subject)?.[1] ?? CA_NAME;

/** Whether `keyPem` is the key of `certPem` and that is a CA certificate. */
function pairs(certPem: string, keyPem: string): boolean {
  try {
    const c = new X509Certificate(certPem);
    return c.ca && c.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

/** Whether the first certificate of `leafPem` was signed by the CA `caPem`. */
function issuedBy(leafPem: string, caPem: string): boolean {
  try {
    const ca = new X509Certificate(caPem);
    const leaf = new X509Certificate(leafPem);
    return leaf.checkIssued(ca) && leaf.verify(ca.publicKey);
  } catch {
    return false;
  }
}

/** Writes a file whole (a new one renamed over the old): a kill leaves the old or the new. */
function put(file: string, data: string, mode: number): void {
  writeFileSync(`${file}.new`, data, { mode });
  renameSync(`${file}.new`, file);
}

export class TlsManager {
  private current!: SecureContext;
  private ca?: Ca;
  private readonly minted = new Map<string, SecureContext>();
  private readonly watched: string[] = [];
  /** Installed certificates by id, and the id serving each SNI name (exact or `*.parent`). */
  private readonly installed = new Map<string, { names: string[]; ctx: SecureContext }>();
  private readonly byName = new Map<string, SecureContext>();
  private fallback?: SecureContext;
  private readonly closers: (() => void)[] = [];
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
    const have = existsSync(f('ca.pem')) && existsSync(f('ca-key.pem')) && pairs(readFileSync(f('ca.pem'), 'utf8'), readFileSync(f('ca-key.pem'), 'utf8'));
    if (!have) {
      const ca = createCa(CA_NAME);
      put(f('ca-key.pem'), ca.keyPem, 0o600);
      put(f('ca.pem'), ca.certPem, 0o644);
      this.opts.log.info('generated a local certificate authority; trust it to reach rootbox over HTTPS', { ca: f('ca.pem') });
    }
    const certPem = readFileSync(f('ca.pem'), 'utf8');
    this.ca = loadCa(certPem, readFileSync(f('ca-key.pem'), 'utf8'), cnOf(certPem));
    this.issueDefault(false);
    return f('ca.pem');
  }

  /** The wildcard certificate for {domain} and *.{domain} under the CA (issued again when it is
   *  missing, for another domain, signed by another CA, or `again`), made the default context. */
  private issueDefault(again: boolean): void {
    const f = (n: string) => join(this.opts.dataDir, 'tls', n);
    const stamp = f('cert.domain');
    const stale = () =>
      !existsSync(f('cert.pem')) ||
      !existsSync(f('key.pem')) ||
      !existsSync(stamp) ||
      readFileSync(stamp, 'utf8') !== this.opts.domain ||
      !issuedBy(readFileSync(f('cert.pem'), 'utf8'), this.ca!.certPem);
    if (again || stale()) {
      const leaf = issueLeaf(this.ca!, [this.opts.domain, `*.${this.opts.domain}`]);
      put(f('key.pem'), leaf.keyPem, 0o600);
      put(f('cert.pem'), leaf.certPem, 0o644);
      put(stamp, this.opts.domain, 0o644);
    }
    const ctx = createSecureContext({ cert: readFileSync(f('cert.pem')), key: readFileSync(f('key.pem')) });
    // an ACME certificate installed for the host stays the default; this one is what it falls back to
    if (this.installed.has(HOST_ID)) this.fallback = ctx;
    else this.current = ctx;
  }

  /** This host's generated CA (undefined with the operator's files): what it offers a cluster
   *  that has no edge CA yet. */
  localCa(): CaFiles | undefined {
    if (!this.caFile || !this.ca) return undefined;
    return { name: cnOf(this.ca.certPem), certPem: this.ca.certPem, keyPem: this.ca.key.export({ type: 'pkcs8', format: 'pem' }) as string };
  }

  /** Takes `ca` (the cluster's edge CA) as this host's CA: written to tls/ca.pem and ca-key.pem,
   *  the wildcard certificate issued again under it, names minted by the old one forgotten.
   *  Answers whether anything changed (false: already this CA, or the operator's files are used);
   *  tls_invalid when `ca` is not a CA certificate with its key. Open connections keep theirs. */
  adoptCa(ca: Pick<CaFiles, 'certPem' | 'keyPem'>): boolean {
    if (!this.caFile || this.ca?.certPem === ca.certPem) return false;
    if (!pairs(ca.certPem, ca.keyPem)) throw AppError.of('tls_invalid', "the cluster's edge CA is not a CA certificate with its key");
    const f = (n: string) => join(this.opts.dataDir, 'tls', n);
    put(f('ca-key.pem'), ca.keyPem, 0o600);
    put(f('ca.pem'), ca.certPem, 0o644);
    this.ca = loadCa(ca.certPem, ca.keyPem, cnOf(ca.certPem));
    this.minted.clear();
    this.issueDefault(true);
    return true;
  }

  /** Runs `fn` when the manager closes (a follower of the cluster's CA stops its retries). */
  onClose(fn: () => void): void {
    this.closers.push(fn);
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
    for (const fn of this.closers.splice(0)) fn();
  }
}
