// Public surface of acme/: certificates from an ACME CA (acme-client), kept in the store and
// handed to the edge's TLS listener by SNI.
//
//   const acme = createAcme({ domain, dataDir, settings: cfg.https.acme, store: store.certificates,
//                             sink: tls, run, log });   // main.ts, after tls, before the edge
//   acme.start();                // installs every stored certificate; starts the host's lifecycle
//
// For a server's own domain (the domains code), with HTTP-01 served by the edge's plain listener:
//
//   if (!acme.configured) …      // no https.acme.directory: issue() throws AppError acme_not_configured
//   const issued = await acme.issue(['www.example.com'], 'http-01');  // {certPem, keyPem, notAfter, names}
//   acme.certificates.save('www.example.com', issued);  // stored (synced) and installed: SNI picks it at once
//   acme.certificates.load('www.example.com');         // CertificateRecord | undefined
//   acme.certificates.remove('www.example.com');        // deleted and uninstalled
//
// issue() throws a plain Error whose message is the CA's or the DNS publisher's reason (fit for a
// domain's `failed` state; it names no host path); it never retries — the caller paces attempts.
// Names are matched by SNI exactly, then as `*.parent`; an unknown name gets the default
// certificate and never starts an order. `acme.http01.answer(path, ip)` is what the edge's plain
// listener serves at /.well-known/acme-challenge/<token>.
//
// The host's own certificate ({domain} + *.{domain}, DNS-01 through RFC 2136 or the exec hook)
// is id 'host'; `acme.status()` is its state for `rootbox status` (state.json beside the account
// key for `rootbox doctor`). No directory configured = nothing ordered: the local CA as before.
//
// Registry mode (`shared`, the registry's certificates): `obtain()` orders through the registry's
// advisory lock, so one host orders a given certificate at a time and the others install its
// result; the store stays the local cache the edge is loaded from, and `pull()` (at start, every
// SHARED_POLL_MS, and when the registry's custom domains change) installs what other hosts stored
// or removed since the last look.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { CertificateRecord, CertificateStore } from '../store/index.js';
import { HostCertificate, type HostCertState } from './host.js';
import { Http01Responder } from './http01.js';
import { order, type ChallengeType, type Issued, type OrderSettings } from './order.js';
import { execPublisher, rfc2136Publisher, type DnsPublisher, type RunCommand } from './publishers.js';

export { Http01Responder } from './http01.js';
export type { ChallengeType, Issued } from './order.js';
export type { HostCertState } from './host.js';
export type { DnsPublisher, RunCommand } from './publishers.js';
export { readAcmeState, acmeStateFile, acmeFacts, type AcmeFacts } from './state.js';

/** Where certificates go to be served (the edge's TlsManager). */
export interface CertificateSink {
  install(id: string, names: string[], certPem: string, keyPem: string): void;
  uninstall(id: string): void;
}

/** A certificate as the cluster registry keeps it (registry.shared implements SharedCertificates). */
export interface SharedCertRow {
  id: string;
  names: string[];
  certPem: string;
  keyPem: string;
  notAfter: number;
  issuedAt: number;
  version: number;
  removed: boolean;
}

/** Certificates shared by every host of a cluster (registry mode); absent on a single box. */
export interface SharedCertificates {
  /** Runs `order` on one host at a time (an advisory lock); the others take the stored result. */
  orderOnce(
    id: string,
    good: (c: SharedCertRow) => boolean,
    order: () => Promise<Omit<SharedCertRow, 'id' | 'version' | 'removed' | 'issuedAt'>>,
  ): Promise<{ cert: SharedCertRow; ordered: boolean }>;
  removeCertificate(id: string): Promise<void>;
  certificatesSince(version: number): Promise<SharedCertRow[]>;
  /** HTTP-01 answers every host serves: the CA may reach any host behind the shared name. */
  putChallenge(token: string, keyAuthorization: string): Promise<void>;
  dropChallenge(token: string): Promise<void>;
  challenge(token: string): Promise<string | undefined>;
}

/** How often a host asks the registry for certificates other hosts stored (renewed or new). */
export const SHARED_POLL_MS = 10_000;

export interface AcmeDeps {
  domain: string;
  dataDir: string;
  settings: Config['https']['acme'];
  store: CertificateStore;
  sink: CertificateSink;
  /** Host command runner (for the exec hook). */
  run: RunCommand;
  log: Logger;
  /** Registry mode: certificates ordered once for the cluster and served by every host. */
  shared?: SharedCertificates;
  /** Registry mode: the HTTP-01 answers every host's orders wrote (the placement cache's copy). */
  challenges?: { get(token: string): string | undefined };
  /** Poll interval for other hosts' certificates (default SHARED_POLL_MS). */
  pollMs?: number;
}

export interface Acme {
  /** True when https.acme.directory is set. */
  readonly configured: boolean;
  readonly http01: Http01Responder;
  issue(names: string[], challenge: ChallengeType): Promise<Issued>;
  /**
   * The certificate `id`, ordered unless the stored one is still `good` (registry mode: ordered by
   * one host of the cluster at a time, the others take its result); stored and installed here.
   */
  obtain(
    id: string,
    names: string[],
    challenge: ChallengeType,
    good: (c: { names: string[]; notAfter: number; issuedAt: number }) => boolean,
  ): Promise<CertificateRecord>;
  /** Registry mode: installs what other hosts stored since the last look (also run on a timer). */
  pull(): Promise<void>;
  readonly certificates: {
    save(id: string, issued: Issued): CertificateRecord;
    load(id: string): CertificateRecord | undefined;
    remove(id: string): boolean;
    all(): CertificateRecord[];
  };
  /** Registry mode: the cluster's certificates. */
  readonly shared?: SharedCertificates;
  /** The host certificate's lifecycle (undefined without ACME). */
  readonly host?: HostCertificate;
  status(): ({ configured: true; directory: string } & HostCertState) | { configured: false };
  start(): void;
  stop(): void;
}

export const HOST_CERT_ID = 'host';

function publisher(d: AcmeDeps): DnsPublisher | undefined {
  const s = d.settings.dns;
  const wait = { resolver: s.resolver, timeoutMs: s.propagationTimeout };
  if (s.provider === 'exec') {
    if (!s.exec.command) throw AppError.of('config_invalid', 'https.acme.dns.provider is exec but https.acme.dns.exec.command is not set');
    return execPublisher(s.exec.command, d.run, wait);
  }
  const r = s.rfc2136;
  if (!r.server || !r.keyName || !r.keySecret) {
    throw AppError.of('config_invalid', 'https.acme.dns.provider rfc2136 needs https.acme.dns.rfc2136.server, keyName and keySecret');
  }
  return rfc2136Publisher({ server: r.server, zone: r.zone ?? d.domain, key: { name: r.keyName, algorithm: r.keyAlgorithm, secret: r.keySecret } }, wait);
}

export function createAcme(d: AcmeDeps): Acme {
  const s = d.settings;
  const http01 = new Http01Responder(d.shared, d.challenges);
  const log = d.log.child({ part: 'acme' });
  const dir = join(d.dataDir, 'acme');
  let orderSettings: OrderSettings | undefined;
  let dns: DnsPublisher | undefined;
  if (s.directory) {
    let caPem: string | undefined;
    try {
      caPem = s.caFile ? readFileSync(s.caFile, 'utf8') : undefined;
    } catch (e) {
      throw AppError.of('config_invalid', `https.acme.caFile cannot be read: ${(e as Error).message}`);
    }
    orderSettings = { directory: s.directory, email: s.email, caPem, accountKeyFile: join(dir, 'account-key.pem'), log };
    dns = publisher(d);
  }
  const issue = async (names: string[], challenge: ChallengeType): Promise<Issued> => {
    if (!orderSettings) throw AppError.of('acme_not_configured', 'no ACME directory is configured (https.acme.directory)');
    return order(names, challenge, orderSettings, { dns, http01 });
  };
  const certificates = {
    save(id: string, issued: Issued): CertificateRecord {
      const rec: CertificateRecord = {
        id,
        names: issued.names,
        certPem: issued.certPem,
        keyPem: issued.keyPem,
        notAfter: issued.notAfter,
        issuedAt: Date.now(),
      };
      d.store.save(rec);
      d.sink.install(id, rec.names, rec.certPem, rec.keyPem);
      return rec;
    },
    load: (id: string) => d.store.load(id),
    remove(id: string): boolean {
      d.sink.uninstall(id);
      return d.store.remove(id);
    },
    all: () => d.store.all(),
  };
  const obtain = async (
    id: string,
    names: string[],
    challenge: ChallengeType,
    good: (c: { names: string[]; notAfter: number; issuedAt: number }) => boolean,
  ): Promise<CertificateRecord> => {
    if (!d.shared) return certificates.save(id, await issue(names, challenge));
    const { cert, ordered } = await d.shared.orderOnce(id, good, () => issue(names, challenge));
    log.info(ordered ? 'certificate ordered for the cluster' : 'certificate taken from the registry', { id, notAfter: new Date(cert.notAfter).toISOString() });
    return install(cert);
  };
  const install = (c: Omit<CertificateRecord, never>): CertificateRecord => {
    const rec: CertificateRecord = { id: c.id, names: c.names, certPem: c.certPem, keyPem: c.keyPem, notAfter: c.notAfter, issuedAt: c.issuedAt };
    d.store.save(rec);
    d.sink.install(rec.id, rec.names, rec.certPem, rec.keyPem);
    return rec;
  };
  let seen = 0;
  let pulling: Promise<void> | undefined;
  let again: Promise<void> | undefined;
  // each call is answered by a look that started after it (one under way may have missed a new row)
  const pull = (): Promise<void> => (pulling ? (again ??= pulling.catch(() => {}).then(() => ((again = undefined), pull()))) : pullNow());
  const pullNow = (): Promise<void> =>
    (pulling = (async () => {
      if (!d.shared) return;
      for (const c of await d.shared.certificatesSince(seen)) {
        seen = Math.max(seen, c.version);
        const have = d.store.load(c.id);
        try {
          if (c.removed) {
            if (have) certificates.remove(c.id);
          } else if (have?.certPem !== c.certPem) install(c);
        } catch (e) {
          log.error('a certificate from the registry cannot be loaded; skipped', { id: c.id, err: (e as Error).message });
        }
      }
    })().finally(() => (pulling = undefined)));
  let poller: NodeJS.Timeout | undefined;
  const names = [d.domain, `*.${d.domain}`];
  const host = orderSettings
    ? new HostCertificate({
        names,
        renewBeforeMs: s.renewBefore,
        retryAfterMs: s.retryAfter,
        stateFile: join(dir, 'state.json'),
        load: () => d.store.load(HOST_CERT_ID),
        order: async (n) => {
          if (!d.shared) return issue(n, 'dns-01');
          const same = (c: { names: string[] }) => c.names.length === n.length && n.every((x) => c.names.includes(x));
          return obtain(HOST_CERT_ID, n, 'dns-01', (c) => same(c) && c.notAfter - s.renewBefore > Date.now());
        },
        // registry mode: obtain() stored and installed it already
        save: (issued) => void (d.shared ? undefined : certificates.save(HOST_CERT_ID, issued)),
        log,
      })
    : undefined;
  return {
    configured: !!orderSettings,
    http01,
    issue,
    obtain,
    pull,
    shared: d.shared,
    certificates,
    host,
    status: () => (host ? { configured: true as const, directory: s.directory!, ...host.status() } : { configured: false as const }),
    start() {
      for (const rec of d.store.all()) {
        try {
          d.sink.install(rec.id, rec.names, rec.certPem, rec.keyPem);
        } catch (e) {
          log.error('a stored certificate cannot be loaded; skipped', { id: rec.id, err: (e as Error).message });
        }
      }
      host?.start();
      if (d.shared) {
        const look = () => void pull().catch((e) => log.warn('certificates from the registry not loaded; trying again', { err: (e as Error).message }));
        look();
        poller = setInterval(look, d.pollMs ?? SHARED_POLL_MS);
        poller.unref();
      }
    },
    stop: () => {
      clearInterval(poller);
      host?.stop();
    },
  };
}

/** The daemon's ACME part (main.ts): stored certificates installed into the TLS listener, the host's own ordered or renewed in the background. */
export function startAcme(d: {
  cfg: Readonly<Config>;
  store: { certificates: CertificateStore };
  tls: CertificateSink;
  run: RunCommand;
  log: Logger;
  /** Registry mode; `placements.domains` tells when a custom domain of any host changed, `placements.challenges` holds every host's HTTP-01 answers. */
  registry?: {
    shared: SharedCertificates;
    placements?: { domains: { watch(fn: () => void): void }; challenges?: { get(token: string): string | undefined } };
  };
}): Acme {
  const acme = createAcme({
    domain: d.cfg.domain,
    dataDir: d.cfg.dataDir,
    settings: d.cfg.https.acme,
    store: d.store.certificates,
    sink: d.tls,
    run: d.run,
    log: d.log,
    shared: d.registry?.shared,
    challenges: d.registry?.placements?.challenges,
    pollMs: d.cfg.cluster.certificatePoll,
  });
  acme.start();
  // a domain of another host became active (its certificate was stored before) or was detached:
  // this host's edge serves its SNI now rather than at the next poll
  d.registry?.placements?.domains.watch(
    () => void acme.pull().catch((e) => d.log.warn('certificates from the registry not loaded', { err: (e as Error).message })),
  );
  return acme;
}

/** Certificates for servers' own domains (the domains module's CertIssuer): HTTP-01, stored and served by SNI under the domain's name. */
export function domainCerts(acme: Acme) {
  return {
    configured: acme.configured,
    // a fresh order (or, in registry mode, one another host stored less than a third of its life ago)
    issue: async (name: string) => void (await acme.obtain(name, [name], 'http-01', (c) => Date.now() < c.notAfter - (c.notAfter - c.issuedAt) * (2 / 3))),
    remove: async (name: string) => {
      acme.certificates.remove(name);
      await acme.shared?.removeCertificate(name);
    },
    validity: (name: string) => {
      const rec = acme.certificates.load(name);
      return rec && { issuedAt: rec.issuedAt, notAfter: rec.notAfter };
    },
  };
}
