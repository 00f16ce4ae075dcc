// Public surface of servers' own domains (POST /servers/{id}/domains): validation, the state
// machine with its DNS checks and certificate orders, and the host → slug map the edge reads.
export { Domains, type DomainsDeps, type SharedDomains } from './service.js';
export type { CertIssuer, DomainsSettings, DomainView, DnsRecordView, Tier } from './types.js';
export { normalizeDomain, txtName } from './names.js';
export { dnsLookup, type DnsLookup } from './dns.js';
