// The hosting slice of the config: account limits, slugs, exposed-port pool and its per-tier
// caps, SMS provider, servers' own domains (domains.ts).

import { z } from 'zod';
import { capacitySchema } from './capacity.js';
import { domainsEnv, domainsSchema } from './domains.js';
import { duration, list } from './fields.js';
import type { EnvBinding } from './env.js';

const portRange = z
  .string()
  .regex(/^\d{1,5}-\d{1,5}$/, 'must be a port range like 20000-20999')
  .refine((s) => {
    const [a, b] = s.split('-').map(Number);
    return a >= 1024 && b <= 65535 && a <= b;
  }, 'must lie within 1024-65535 with start <= end');

const portLimit = (who: string, perServer: number, perAccount: number) =>
  z
    .strictObject({
      perServer: z.coerce
        .number()
        .int()
        .min(0)
        .max(65535)
        .default(perServer)
        .describe(`Ports one server of ${who} may expose at once (POST /expose answers 403 \`port_limit\` beyond).`),
      perAccount: z.coerce
        .number()
        .int()
        .min(0)
        .max(65535)
        .default(perAccount)
        .describe(`Ports all servers of ${who} may expose together (403 \`port_limit\` beyond).`),
    })
    .prefault({});

export const hostingSchema = z
  .strictObject({
    anonServersPerIp: z.coerce
      .number()
      .int()
      .min(0)
      .max(1000)
      .default(3)
      .describe(
        'Servers that anonymous accounts may hold per source IP (403 beyond). Phone-verified accounts have no IP limit. In cluster mode every host counts them together.',
      ),
    maxServersPerAccount: z.coerce
      .number()
      .int()
      .min(1)
      .max(10_000)
      .default(20)
      .describe('Servers one account may hold at once (403 beyond). In cluster mode every host counts them together.'),
    portPool: portRange.default('20000-20999').describe('Public TCP ports handed out by POST /expose, as `first-last`.'),
    portLimits: z
      .strictObject({
        anonymous: portLimit('an anonymous account (no verified phone)', 2, 3),
        verified: portLimit('a phone-verified account', 5, 10),
        paid: portLimit('an account with a positive balance', 20, 50),
      })
      .prefault({}),
    brandSlugs: list(z.string().regex(/^[a-z0-9-]+$/))
      .prefault([])
      .describe(
        'Extra slugs nobody may take (brand names), comma-separated in the environment; reserved labels such as api, verify, www, ssh, admin, mail are always refused.',
      ),
    rateLimit: z
      .strictObject({
        perIpPerMinute: z.coerce
          .number()
          .int()
          .min(1)
          .default(120)
          .describe(
            "Requests per source IP per minute to the hosting API at api.{domain}: every route, /mcp included, except GET /healthz and GET /openapi.json (429 with Retry-After beyond). The verification API and servers' own sites are not counted. In cluster mode every host counts them together.",
          ),
        perKeyPerMinute: z.coerce
          .number()
          .int()
          .min(1)
          .default(240)
          .describe('Hosting API requests per api_key per minute. In cluster mode every host counts them together.'),
        createsPerIpPerHour: z.coerce
          .number()
          .int()
          .min(1)
          .default(30)
          .describe('POST /create calls per source IP per hour. In cluster mode every host counts them together.'),
      })
      .prefault({}),
    sms: z
      .strictObject({
        provider: z
          .enum(['log', 'twilio'])
          .default('log')
          .describe("`log` writes verification codes to the daemon log (for operators testing); `twilio` sends them with Twilio's Messages API."),
        twilioBaseUrl: z.string().url().default('https://api.twilio.com').describe('Base URL of the Twilio API.'),
        twilioAccountSid: z.string().optional().describe('Twilio account SID.'),
        twilioAuthToken: z.string().optional().describe('Twilio auth token. Never logged.'),
        twilioFrom: z.string().optional().describe('Sender: an E.164 number or a Messaging Service SID (MG…).'),
      })
      .prefault({}),
    exec: z
      .strictObject({
        maxPerAccount: z.coerce
          .number()
          .int()
          .min(1)
          .default(20)
          .describe(
            'Commands (POST /servers/{id}/exec and the file operations, each a `runc exec`) all servers of one account may run at once over HTTP; one more is answered 429 `too_many_commands`. Per server they share `ssh.maxExecsPerServer` with SSH. In cluster mode every host counts them together.',
          ),
        outputMax: z.coerce
          .number()
          .int()
          .min(1024)
          .default(1024 * 1024)
          .describe('Bytes of stdout and of stderr (each) a JSON exec answer keeps; the rest is read and dropped, and `truncated` says so.'),
        timeoutMax: z
          .strictObject({
            anonymous: z.coerce.number().min(1).default(300).describe('Longest exec `timeout` (seconds) for an anonymous account.'),
            verified: z.coerce.number().min(1).default(900).describe('Longest exec `timeout` (seconds) for a phone-verified account.'),
            paid: z.coerce.number().min(1).default(3600).describe('Longest exec `timeout` (seconds) for an account with a positive balance.'),
          })
          .prefault({}),
        killGrace: duration().prefault('2s').describe('Time between SIGTERM and SIGKILL of an exec whose timeout passed or whose client left.'),
      })
      .prefault({}),
    files: z
      .strictObject({
        maxBody: z.coerce
          .number()
          .int()
          .min(1024)
          .default(256 * 1024 * 1024)
          .describe('Largest body of PUT /servers/{id}/files and POST /servers/{id}/files/archive, in bytes (413 `body_too_large` beyond).'),
      })
      .prefault({}),
    domains: domainsSchema,
    capacity: capacitySchema,
  })
  .prefault({});

export const hostingEnv: EnvBinding[] = [
  { env: 'ROOTBOX_ANON_SERVERS_PER_IP', path: 'hosting.anonServersPerIp' },
  { env: 'ROOTBOX_PORT_POOL', path: 'hosting.portPool' },
  { env: 'ROOTBOX_BRAND_SLUGS', path: 'hosting.brandSlugs' },
  { env: 'ROOTBOX_SMS_PROVIDER', path: 'hosting.sms.provider' },
  { env: 'ROOTBOX_TWILIO_BASE_URL', path: 'hosting.sms.twilioBaseUrl' },
  { env: 'ROOTBOX_TWILIO_ACCOUNT_SID', path: 'hosting.sms.twilioAccountSid' },
  { env: 'ROOTBOX_TWILIO_AUTH_TOKEN', path: 'hosting.sms.twilioAuthToken' },
  { env: 'ROOTBOX_TWILIO_FROM', path: 'hosting.sms.twilioFrom' },
  ...domainsEnv,
];
