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
// certificate and never starts an order. `acme.http01.answer(path)` is what the edge's plain
// listener serves at /.well-known/acme-challenge/<token>.
//
// The host's own certificate ({domain} + *.{domain}, DNS-01 through RFC 2136 or the exec hook)
// is id 'host'; `acme.status()` is its state for `rootbox status` (state.json beside the account
// key for `rootbox doctor`). No directory configured = nothing ordered: the local CA as before.

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

export interface AcmeDeps {
  domain: string;
  dataDir: string;
  settings: Config['https']['acme'];
  store: CertificateStore;
  sink: CertificateSink;
  /** Host command runner (for the exec hook). */
  run: RunCommand;
  log: Logger;
}

export interface Acme {
  /** True when https.acme.directory is set. */
  readonly configured: boolean;
  readonly http01: Http01Responder;
  issue(names: string[], challenge: ChallengeType): Promise<Issued>;
  readonly certificates: {
    save(id: string, issued: Issued): CertificateRecord;
    load(id: string): CertificateRecord | undefined;
    remove(id: string): boolean;
    all(): CertificateRecord[];
  };
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
  const http01 = new Http01Responder();
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
  const names = [d.domain, `*.${d.domain}`];
  const host = orderSettings
    ? new HostCertificate({
        names,
        renewBeforeMs: s.renewBefore,
        retryAfterMs: s.retryAfter,
        stateFile: join(dir, 'state.json'),
        load: () => d.store.load(HOST_CERT_ID),
        order: (n) => issue(n, 'dns-01'),
        save: (issued) => void certificates.save(HOST_CERT_ID, issued),
        log,
      })
    : undefined;
  return {
    configured: !!orderSettings,
    http01,
    issue,
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
    },
    stop: () => host?.stop(),
  };
}

/** The daemon's ACME part (main.ts): stored certificates installed into the TLS listener, the host's own ordered or renewed in the background. */
export function startAcme(d: { cfg: Readonly<Config>; store: { certificates: CertificateStore }; tls: CertificateSink; run: RunCommand; log: Logger }): Acme {
  const acme = createAcme({
    domain: d.cfg.domain,
    dataDir: d.cfg.dataDir,
    settings: d.cfg.https.acme,
    store: d.store.certificates,
    sink: d.tls,
    run: d.run,
    log: d.log,
  });
  acme.start();
  return acme;
}

/** Certificates for servers' own domains (the domains module's CertIssuer): HTTP-01, stored and served by SNI under the domain's name. */
export function domainCerts(acme: Acme) {
  return {
    configured: acme.configured,
    issue: async (name: string) => void acme.certificates.save(name, await acme.issue([name], 'http-01')),
    remove: async (name: string) => void acme.certificates.remove(name),
    validity: (name: string) => {
      const rec = acme.certificates.load(name);
      return rec && { issuedAt: rec.issuedAt, notAfter: rec.notAfter };
    },
  };
}
