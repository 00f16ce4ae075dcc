// Public surface of servers' own domains (POST /servers/{id}/domains): validation, the state
// machine with its DNS checks and certificate orders, and the host → slug map the edge reads.
export { Domains, type CertIssuer, type DomainsDeps, type DomainsSettings, type DomainView, type DnsRecordView, type Tier } from './service.js';
export { normalizeDomain, txtName } from './names.js';
export { dnsLookup, type DnsLookup } from './dns.js';
