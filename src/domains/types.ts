// The shapes shared by the domains module: settings, the certificate port, the API's views.

import type { DomainRecord } from '../store/index.js';

export type Tier = 'anonymous' | 'verified' | 'paid';

export interface DomainsSettings {
  /** The service's own domain. */
  domain: string;
  publicIp: string;
  limits: Record<Tier, number>;
  /** Certificate orders one domain may cost per hour. */
  attemptsPerHour: number;
  checkInterval: number;
  pendingTimeout: number;
}

/** Certificates for servers' own domains (the ACME module behind it, wired in main.ts). */
export interface CertIssuer {
  /** False when no ACME directory is configured: custom domains are then refused (503 not_configured). */
  readonly configured: boolean;
  /** Orders a certificate for the name through HTTP-01, stores it and serves it by SNI; throws with the CA's reason. */
  issue(domain: string): Promise<void>;
  /** Stops serving the name's certificate and forgets it. */
  remove(domain: string): Promise<void>;
  /** The name's certificate's validity (ms since the epoch); undefined when it has none. */
  validity(domain: string): { issuedAt: number; notAfter: number } | undefined;
}

export interface DnsRecordView {
  type: 'CNAME' | 'A' | 'AAAA' | 'TXT';
  name: string;
  value: string;
}

export interface DomainView {
  domain: string;
  server: string;
  state: DomainRecord['state'];
  reason: string | null;
  records: DnsRecordView[];
  created_at: string;
  checked_at: string | null;
  active_at: string | null;
}

export const HOUR = 3_600_000;
