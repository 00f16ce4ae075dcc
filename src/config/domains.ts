// The hosting.domains slice of the config: servers' own domains (POST /servers/{id}/domains) —
// the DNS server their records are checked against, how many each tier may attach, how often
// pending ones are checked and how many certificate orders one domain may cost per hour.

import { z } from 'zod';
import { duration } from './fields.js';
import type { EnvBinding } from './env.js';

const tierLimit = (who: string, n: number) =>
  z.coerce
    .number()
    .int()
    .min(0)
    .max(10_000)
    .default(n)
    .describe(`Domains the servers of ${who} may carry together (POST /servers/{id}/domains answers 403 \`domain_limit\` beyond; 0: none).`);

export const domainsSchema = z
  .strictObject({
    resolver: z
      .string()
      .regex(/^(\[[0-9a-f:.]+\]|[0-9a-f:.]+)(:\d{1,5})?$/i, 'must be an IP address, optionally with :port ([v6]:port for IPv6)')
      .optional()
      .describe(
        "DNS server the daemon asks for its customers' records (the ownership TXT, the CNAME or A/AAAA to this host), as `ip` or `ip:port`. Default: the system's resolvers (/etc/resolv.conf).",
      ),
    limits: z
      .strictObject({
        anonymous: tierLimit('an anonymous account (no verified phone)', 0),
        verified: tierLimit('a phone-verified account', 3),
        paid: tierLimit('an account with a positive balance', 20),
      })
      .prefault({}),
    attemptsPerHour: z.coerce
      .number()
      .int()
      .min(1)
      .max(100)
      .default(3)
      .describe(
        'Certificate orders one domain may cost per hour (each proven domain orders one through HTTP-01); beyond, POST …/check answers 429 `issuance_rate_limited` with Retry-After.',
      ),
    checkInterval: duration()
      .prefault('1m')
      .describe('How often the DNS records of domains still waiting for them (state `pending_dns`) are checked; POST …/check checks at once.'),
    pendingTimeout: duration().prefault('7d').describe('How long a domain may wait for its DNS records; then it is `failed` (POST …/check starts it again).'),
  })
  .prefault({});

export const domainsEnv: EnvBinding[] = [
  { env: 'ROOTBOX_DOMAINS_RESOLVER', path: 'hosting.domains.resolver' },
  { env: 'ROOTBOX_DOMAINS_LIMIT_VERIFIED', path: 'hosting.domains.limits.verified' },
  { env: 'ROOTBOX_DOMAINS_LIMIT_PAID', path: 'hosting.domains.limits.paid' },
  { env: 'ROOTBOX_DOMAINS_ATTEMPTS_PER_HOUR', path: 'hosting.domains.attemptsPerHour' },
  { env: 'ROOTBOX_DOMAINS_CHECK_INTERVAL', path: 'hosting.domains.checkInterval' },
];
