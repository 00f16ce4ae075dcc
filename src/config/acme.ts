// The `https.acme` slice: automatic certificates for {domain} and *.{domain} from an ACME CA
// through DNS-01 (RFC 2136 or an exec hook), and for servers' own domains through HTTP-01.
// Unset `directory` keeps the local CA (or the operator's https.cert/key).

import { z } from 'zod';
import { duration } from './fields.js';
import type { EnvBinding } from './env.js';

export const acmeSchema = z
  .strictObject({
    directory: z
      .string()
      .url()
      .optional()
      .describe(
        'ACME directory URL, e.g. https://acme-staging-v02.api.letsencrypt.org/directory (staging) or https://acme-v02.api.letsencrypt.org/directory. Unset: no ACME; the local CA (or `https.cert`/`https.key`) serves as today.',
      ),
    email: z.string().email().optional().describe('Contact address given to the CA for the ACME account (expiry notices).'),
    caFile: z
      .string()
      .optional()
      .describe("PEM file of extra roots trusted for the ACME directory's own HTTPS (a test CA such as Pebble's); the system roots stay trusted."),
    renewBefore: duration()
      .prefault('30d')
      .describe('Renew a certificate this long before it expires (plus a small random jitter so hosts do not renew in step).'),
    retryAfter: duration()
      .prefault('5m')
      .describe(
        'First wait after a failed issuance or renewal; it doubles with each failure up to 12h. The previous certificate keeps being served meanwhile.',
      ),
    dns: z
      .strictObject({
        provider: z
          .enum(['rfc2136', 'exec'])
          .default('rfc2136')
          .describe('How DNS-01 TXT records are published: `rfc2136` (dynamic update signed with a TSIG key) or `exec` (a program you provide).'),
        resolver: z
          .string()
          .optional()
          .describe(
            "DNS server (host or host:port) used to find the zone's authoritative servers, which are then asked directly for the TXT record. Default: `https.acme.dns.rfc2136.server` with rfc2136, the system's resolver with exec.",
          ),
        propagationTimeout: duration().prefault('2m').describe('How long to wait for the TXT record to appear on every authoritative server of the zone.'),
        rfc2136: z
          .strictObject({
            server: z.string().optional().describe('Primary DNS server accepting the updates: host, host:port or [v6]:port (port 53 by default).'),
            zone: z.string().optional().describe('Zone the updates go to. Default: `domain`.'),
            keyName: z.string().optional().describe('TSIG key name.'),
            keyAlgorithm: z.enum(['hmac-sha256', 'hmac-sha384', 'hmac-sha512']).default('hmac-sha256').describe('TSIG algorithm.'),
            keySecret: z.string().optional().describe('TSIG key secret, base64 (as in BIND\'s `key { secret "…"; }`).'),
          })
          .prefault({}),
        exec: z
          .strictObject({
            command: z
              .string()
              .optional()
              .describe(
                'Program called as `<command> present <name> <value>` to add the TXT record and `<command> cleanup <name> <value>` to remove it (run through /bin/sh, so it may carry arguments); exit 0 means done.',
              ),
          })
          .prefault({}),
      })
      .prefault({}),
  })
  .prefault({});

export const acmeEnv: EnvBinding[] = [
  { env: 'ROOTBOX_ACME_DIRECTORY', path: 'https.acme.directory' },
  { env: 'ROOTBOX_ACME_EMAIL', path: 'https.acme.email' },
  { env: 'ROOTBOX_ACME_CA_FILE', path: 'https.acme.caFile' },
  { env: 'ROOTBOX_ACME_RENEW_BEFORE', path: 'https.acme.renewBefore' },
  { env: 'ROOTBOX_ACME_RETRY_AFTER', path: 'https.acme.retryAfter' },
  { env: 'ROOTBOX_ACME_DNS_PROVIDER', path: 'https.acme.dns.provider' },
  { env: 'ROOTBOX_ACME_DNS_RESOLVER', path: 'https.acme.dns.resolver' },
  { env: 'ROOTBOX_ACME_DNS_PROPAGATION_TIMEOUT', path: 'https.acme.dns.propagationTimeout' },
  { env: 'ROOTBOX_ACME_RFC2136_SERVER', path: 'https.acme.dns.rfc2136.server' },
  { env: 'ROOTBOX_ACME_RFC2136_ZONE', path: 'https.acme.dns.rfc2136.zone' },
  { env: 'ROOTBOX_ACME_RFC2136_KEY_NAME', path: 'https.acme.dns.rfc2136.keyName' },
  { env: 'ROOTBOX_ACME_RFC2136_KEY_ALGORITHM', path: 'https.acme.dns.rfc2136.keyAlgorithm' },
  { env: 'ROOTBOX_ACME_RFC2136_KEY_SECRET', path: 'https.acme.dns.rfc2136.keySecret' },
  { env: 'ROOTBOX_ACME_EXEC_COMMAND', path: 'https.acme.dns.exec.command' },
];
