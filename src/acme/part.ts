// The daemon's ACME part (main.ts's startAcme: the service started, and in registry mode told when
// another host's custom domain changed) and the issuer the domains module orders servers' own
// certificates through (domainCerts).

import type { Config } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { CertificateStore } from '../store/index.js';
import type { RunCommand } from './publishers.js';
import { createAcme, type Acme, type CertificateSink, type SharedCertificates } from './service.js';

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
