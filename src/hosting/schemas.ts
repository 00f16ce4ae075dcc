// The zod schemas of the hosting API: what the routes accept (the Router validates bodies,
// queries and path parameters with them) and what they answer. /openapi.json is derived from the
// route declarations that use them (routes.ts); SCHEMAS names the ones shown as components.

import { z } from 'zod';
import { challengeBodySchema } from '../payments/index.js';
import { ExecAnswer, ExecRequest } from './exec.js';
import { FileList, Written } from './fileshapes.js';

const SERVER_ID = /^srv_[0-9a-f]{1,32}$/;
const serverId = z.string().regex(SERVER_ID, 'must be a server id like srv_0a1b2c3d4e5f');

export const CreateRequest = z
  .object({
    subdomains: z
      .array(z.string().max(64, 'each wanted subdomain must be at most 64 characters'))
      .max(20, 'at most 20 wanted subdomains')
      .optional()
      .describe('Wanted slugs in order of preference; lowercased; a-z, 0-9, -; 3 to 32 characters.'),
    never_sleep: z.boolean().optional().describe('Keep the server awake at all times (needs a verified phone).'),
    phone: z.string().max(32, 'must be at most 32 characters').optional().describe('E.164 number for phone sign-up or login.'),
    code: z.string().max(16, 'must be at most 16 characters').optional().describe('The SMS code that completes phone sign-up or login.'),
  })
  .strict();

export const ExposeRequest = z
  .object({
    server: serverId,
    port: z.number().int('must be an integer').min(1).max(65535).describe('TCP port inside the container.'),
  })
  .strict();

export const FeedbackRequest = z
  .object({
    message: z.string().trim().min(1, 'must not be empty').max(5000, 'must be at most 5000 characters'),
    contact: z.string().trim().max(200, 'must be at most 200 characters').optional(),
  })
  .strict();

export const RechargeRequest = z
  .object({
    usd: z
      .number()
      .min(0.01, 'must be at least 0.01')
      .describe('Dollars to add, at most 6 decimals; the operator sets the largest amount (billing.maxRechargeUsd).'),
  })
  .strict();

export const ServerPath = z.object({ id: z.string().regex(SERVER_ID).describe('Server id, srv_ followed by hex digits.') });

export const UsageQuery = z.object({
  limit: z.coerce.number().int('must be a whole number').min(1).max(500).optional().describe('Entries per page, 1 to 500 (default 50).'),
  cursor: z.string().max(512).optional().describe('The next_cursor of the previous page.'),
});

export const Credits = z.object({
  tier: z.enum(['anonymous', 'verified', 'paid']),
  ram_gb_hours_left: z.number(),
  egress_gb_left: z.number(),
  balance_usd: z.number(),
  checkpoint_bytes: z
    .number()
    .min(0)
    .describe(
      "Bytes your servers' checkpoints hold in the store now, billed per GB-month like disk (billing.checkpointUsdPerGbMonth; the free grant does not cover it).",
    ),
});

export const ExposedPort = z.object({
  public: z.string().describe('host:port'),
  container_port: z.number().int().min(1).max(65535),
  protocol: z.literal('tcp'),
});

export const Server = z.object({
  id: z.string(),
  subdomain: z.string(),
  state: z
    .enum(['creating', 'running', 'sleeping', 'waking', 'stopped', 'failed', 'unavailable'])
    .describe('unavailable: the host that runs the server is down (cluster mode); the rest of the object is what this host knows'),
  never_sleep: z.boolean(),
  suspended: z.boolean(),
  flag: z.string().nullable(),
  exposed_ports: z.array(ExposedPort),
  usage: z.object({
    disk_mb_used: z.number().min(0).nullable().describe('null when not known here (state unavailable: the host that has the disk is down)'),
    domains: z.array(z.string()),
  }),
  credits: Credits,
});

export const CreateResponse = Server.extend({
  ssh: z.string(),
  ssh_private_key: z.string(),
  api_key: z.string().optional(),
  subdomain_note: z.string().optional(),
  account_note: z.string().optional(),
});

export const VerificationRequired = z.object({
  verification_required: z.literal(true),
  phone: z.string(),
  expires_in: z.number().int().min(0).describe('Seconds the code stays valid.'),
  detail: z.string(),
});

export const UpgradeEnvelope = z.object({
  upgrade_required: z.literal(true),
  reason: z.literal('free_tier_exceeded'),
  upgrade_url: z.string(),
  message: z.string(),
  error: z.literal('free_tier_exceeded'),
  detail: z.string(),
  // Beside the envelope, a read endpoint answers what it would have answered:
  suspended: z.boolean().optional().describe('GET /servers/{id}: whether the server is suspended (stopped until credit is added).'),
  server: Server.optional().describe('GET /servers/{id}: the Server object.'),
  servers: z.array(Server).optional().describe('GET /servers: the Server objects.'),
  credits: Credits.optional().describe('GET /credits: the Credits object.'),
  api_key: z.string().optional().describe('POST /create with a phone login into an exhausted account: its api_key, to recharge with.'),
  account_note: z.string().optional(),
});

export const PortLimitError = z.object({
  error: z.literal('port_limit'),
  detail: z.string(),
  limit: z.number().int().min(0).describe('The cap that was reached.'),
  scope: z.enum(['server', 'account']),
  tier: z.enum(['anonymous', 'verified', 'paid']),
});

export const DomainRequest = z
  .object({
    domain: z
      .string()
      .max(300, 'must be at most 300 characters')
      .describe("A host name you control, e.g. www.example.com; IDN names are stored as punycode. Not the service's own domain or a name under it."),
  })
  .strict();

export const DomainPath = ServerPath.extend({ domain: z.string().max(300).describe('The domain as listed (punycode), or its IDN form.') });

export const DnsRecord = z.object({
  type: z.enum(['CNAME', 'A', 'AAAA', 'TXT']),
  name: z.string(),
  value: z.string(),
});

export const Domain = z.object({
  domain: z.string().describe('Lowercase, punycode.'),
  server: z.string(),
  state: z
    .enum(['pending_dns', 'issuing', 'active', 'failed'])
    .describe('pending_dns: waiting for the records; issuing: ownership proven, certificate being ordered; active: served over HTTPS; failed: see reason.'),
  reason: z.string().nullable().describe('Why the domain failed, or what the last check of a pending one did not find.'),
  records: z
    .array(DnsRecord)
    .describe('The records to create: a CNAME to <slug>.{domain} (A/AAAA to the public address for a zone apex) and the TXT ownership token.'),
  created_at: z.string().describe('ISO 8601'),
  checked_at: z.string().nullable().describe('ISO 8601 of the last DNS check.'),
  active_at: z.string().nullable().describe('ISO 8601'),
});

export const DomainList = z.object({ domains: z.array(Domain) });

export const DomainLimitError = z.object({
  error: z.literal('domain_limit'),
  detail: z.string(),
  limit: z.number().int().min(0).describe('Domains the tier allows the account in all.'),
  tier: z.enum(['anonymous', 'verified', 'paid']),
});

export const Ok = z.object({ ok: z.literal(true) });
export const Health = z.object({ ok: z.literal(true), service: z.string() });
export const ServerList = z.object({ servers: z.array(Server) });
export const RotatedKey = z.object({ api_key: z.string().describe('The new api_key; the old one stops working.'), tier: Credits.shape.tier });

export const UsagePage = z.object({
  entries: z.array(
    z.object({
      kind: z.enum(['usage', 'credit']),
      server: z.string().nullable(),
      from: z.string().describe('ISO 8601'),
      to: z.string().describe('ISO 8601'),
      ram_gb_hours: z.number(),
      disk_gb_months: z.number(),
      checkpoint_gb_months: z.number().describe("GB-months of checkpoint storage: the bytes the server's checkpoints hold in the store over the period."),
      egress_gb: z.number(),
      usd: z.number().describe('Drawn from the balance (usage) or added to it (credit).'),
      source: z.string().nullable().describe('Where a credit came from.'),
    }),
  ),
  next_cursor: z.string().nullable(),
});

export const RechargeInfo = z.object({
  how: z.string(),
  endpoint: z.string(),
  method: z.literal('POST'),
  body: z.object({ usd: z.number() }),
  payments_configured: z.boolean(),
  verify_phone_instead: z.string().optional().describe('Absent for an account whose phone is verified.'),
  credits: Credits.optional().describe('Your credits: present when the request carries your api_key.'),
});

const Grant = z.object({ ram_gb_hours: z.number(), egress_gb: z.number() });
export const Landing = z.object({
  service: z.string(),
  domain: z.string(),
  about: z.string(),
  create: z.object({ method: z.literal('POST'), url: z.string(), curl: z.string().describe('The one line that creates a server.') }),
  openapi: z.string().describe('This API described in OpenAPI 3.1.'),
  mcp: z.string().describe('The MCP endpoint (Streamable HTTP): the API as tools for agents.'),
  recharge: z.string(),
  feedback: z.string(),
  over_https: z
    .object({ exec: z.string(), files: z.string() })
    .describe('Run a command in a server and move its files over HTTPS with the api_key (no SSH client needed).'),
  verify: z.object({ info: z.string(), openapi: z.string() }).describe('The verification service.'),
  prices: z.object({ ram_usd_per_gb_hour: z.number(), disk_usd_per_gb_month: z.number(), egress_usd_per_gb: z.number() }),
  free_grant: z.object({ anonymous: Grant, verified_phone: Grant }),
});

export const RechargeResult = z.object({
  ok: z.literal(true),
  credited_usd: z.number().describe('0 while the payment is being settled.'),
  settlement: z.enum(['settled', 'pending']),
  detail: z.string(),
  credits: Credits,
});

export const OpenApi = z.record(z.string(), z.unknown()).describe('An OpenAPI 3.1 document.');

/** What the MCP transport itself answers when it refuses a request (bad Accept, protocol version). */
export const JsonRpcError = z.object({
  jsonrpc: z.literal('2.0'),
  error: z.object({ code: z.number().int(), message: z.string() }),
  id: z.union([z.string(), z.number(), z.null()]),
});

/** The schemas listed under components.schemas, by name. */
// checkpoints (checkpoints.ts)
export const CheckpointObject = z.object({
  id: z.string().describe('Checkpoint id, ckp_ followed by 22 letters and digits.'),
  server_id: z.string(),
  created_at: z.string().describe('ISO 8601'),
  size_bytes: z.number().int().describe("Bytes of the server's disk it holds (its non-zero parts)."),
  kind: z.enum(['manual', 'auto']).describe('manual: asked for; auto: taken when the server went to sleep or on the interval.'),
  comment: z.string().optional(),
});
export const CheckpointList = z.object({ checkpoints: z.array(CheckpointObject).describe('Newest first.') });
export const CheckpointRequest = z
  .object({ comment: z.string().max(200, 'must be at most 200 characters').optional().describe('A note kept with the checkpoint.') })
  .strict();
export const ForkRequest = z
  .object({
    checkpoint: z.string().max(64).optional().describe('The checkpoint to fork from; absent: one taken now.'),
    slug: z.string().max(64, 'must be at most 64 characters').optional().describe("The new server's wanted subdomain (a random one when absent or taken)."),
  })
  .strict();
export const RestoreRequest = z.object({ checkpoint: z.string().max(64).describe('The checkpoint to restore, from GET /servers/{id}/checkpoints.') }).strict();

export const SCHEMAS: Record<string, z.ZodType> = {
  Checkpoint: CheckpointObject,
  CheckpointList,
  CheckpointRequest,
  ForkRequest,
  RestoreRequest,
  CreateRequest,
  ExposeRequest,
  FeedbackRequest,
  RechargeRequest,
  Credits,
  ExposedPort,
  Server,
  CreateResponse,
  VerificationRequired,
  UpgradeEnvelope,
  PortLimitError,
  DomainRequest,
  Domain,
  DomainLimitError,
  PaymentRequired: challengeBodySchema,
  UsagePage,
  RechargeInfo,
  RechargeResult,
  Landing,
  JsonRpcError,
  ExecRequest,
  ExecAnswer,
  FileList,
  Written,
};
