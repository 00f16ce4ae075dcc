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
// Registry mode (`shared`, the registry's certificates): `obtain()` orders under the registry's
// order lease, so one host orders a given certificate at a time and the others install its
// result; the store stays the local cache the edge is loaded from, and `pull()` (at start, every
// SHARED_POLL_MS, and when the registry's custom domains change) installs what other hosts stored
// or removed since the last look.

export { Http01Responder } from './http01.js';
export type { ChallengeType, Issued } from './order.js';
export type { HostCertState } from './host.js';
export type { DnsPublisher, RunCommand } from './publishers.js';
export { readAcmeState, acmeStateFile, acmeFacts, type AcmeFacts } from './state.js';
export { domainCerts, startAcme } from './part.js';
export {
  createAcme,
  HOST_CERT_ID,
  SHARED_POLL_MS,
  type Acme,
  type AcmeDeps,
  type CertificateSink,
  type SharedCertificates,
  type SharedCertRow,
} from './service.js';
