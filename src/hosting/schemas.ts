// The zod schemas of the hosting API: request bodies the handlers validate and the shapes they
// answer with. /openapi.json is generated from these (openapi.ts).

import { z } from 'zod';

export const registry = z.registry<{ id: string }>();

const serverId = z.string().regex(/^srv_[0-9a-f]{1,32}$/, 'must be a server id like srv_0a1b2c3d4e5f');

export const CreateRequest = z
  .object({
    subdomains: z.array(z.string().max(64, 'each wanted subdomain must be at most 64 characters')).max(20, 'at most 20 wanted subdomains').optional()
      .describe('Wanted slugs in order of preference; lowercased; a-z, 0-9, -; 3 to 32 characters.'),
    never_sleep: z.boolean().optional().describe('Keep the server awake at all times (needs a verified phone).'),
    phone: z.string().max(32, 'must be at most 32 characters').optional().describe('E.164 number for phone sign-up or login.'),
    code: z.string().max(16, 'must be at most 16 characters').optional().describe('The SMS code that completes phone sign-up or login.'),
  })
  .strict();
registry.add(CreateRequest, { id: 'CreateRequest' });

export const ExposeRequest = z
  .object({
    server: serverId,
    port: z.number().int('must be an integer').min(1).max(65535).describe('TCP port inside the container.'),
  })
  .strict();
registry.add(ExposeRequest, { id: 'ExposeRequest' });

export const FeedbackRequest = z
  .object({
    message: z.string().trim().min(1, 'must not be empty').max(5000, 'must be at most 5000 characters'),
    contact: z.string().trim().max(200, 'must be at most 200 characters').optional(),
  })
  .strict();
registry.add(FeedbackRequest, { id: 'FeedbackRequest' });

export const Credits = z.object({
  tier: z.enum(['anonymous', 'verified', 'paid']),
  ram_gb_hours_left: z.number(),
  egress_gb_left: z.number(),
  balance_usd: z.number(),
});
registry.add(Credits, { id: 'Credits' });

export const ExposedPort = z.object({ public: z.string(), container_port: z.number().int(), protocol: z.literal('tcp') });
registry.add(ExposedPort, { id: 'ExposedPort' });

export const Server = z.object({
  id: z.string(),
  subdomain: z.string(),
  state: z.enum(['creating', 'running', 'sleeping', 'waking', 'stopped', 'failed']),
  never_sleep: z.boolean(),
  suspended: z.boolean(),
  flag: z.string().nullable(),
  exposed_ports: z.array(ExposedPort),
  usage: z.object({ disk_mb_used: z.number(), domains: z.array(z.string()) }),
  credits: Credits,
});
registry.add(Server, { id: 'Server' });

export const CreateResponse = Server.extend({
  ssh: z.string(),
  ssh_private_key: z.string(),
  api_key: z.string().optional(),
  subdomain_note: z.string().optional(),
  account_note: z.string().optional(),
});
registry.add(CreateResponse, { id: 'CreateResponse' });

export const VerificationRequired = z.object({
  verification_required: z.literal(true),
  phone: z.string(),
  expires_in: z.number().int(),
  detail: z.string(),
});
registry.add(VerificationRequired, { id: 'VerificationRequired' });

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
registry.add(UpgradeEnvelope, { id: 'UpgradeEnvelope' });

export const ErrorBody = z.object({
  error: z.string(),
  detail: z.string(),
  request_id: z.string().optional().describe('On every 5xx: the id of the request (also the X-Request-Id header); quote it when reporting the failure.'),
});
registry.add(ErrorBody, { id: 'Error' });
