// What the SDK says on the wire, as data: every operation of the hosting API's OpenAPI document
// and the SDK method that calls it (or why none does), the field names of each schema the SDK
// sends or reads, and the query parameters it sends. test/sdk/coverage.test.ts compares these with
// the document the daemon serves (and the Python SDK's own copy), so a route or field added to the
// API without the SDK following fails there. The types in types.ts are checked against the same
// lists by the compiler (their keys are the camelCase of these names).

/** "METHOD /path" → the SDK method that calls it: `rootbox.<name>` on a client, `server.<name>`
 *  on a server; or `{ leftOut: why }`. */
export const OPERATIONS = {
  'GET /': 'rootbox.info',
  'GET /healthz': 'rootbox.health',
  'GET /openapi.json': 'rootbox.openapi',
  'POST /create': 'rootbox.create',
  'GET /servers': 'rootbox.servers.list',
  'GET /servers/{id}': 'rootbox.servers.get',
  'DELETE /servers/{id}': 'server.delete',
  'POST /servers/{id}/restart': 'server.restart',
  'GET /servers/{id}/logs': 'server.logs',
  'GET /credits': 'rootbox.credits',
  'GET /usage': 'rootbox.usage',
  'POST /expose': 'server.expose',
  'DELETE /expose': 'server.unexpose',
  'POST /account/rotate-key': 'rootbox.rotateKey',
  'POST /servers/{id}/domains': 'server.domains.add',
  'GET /servers/{id}/domains': 'server.domains.list',
  'POST /servers/{id}/domains/{domain}/check': 'server.domains.check',
  'DELETE /servers/{id}/domains/{domain}': 'server.domains.remove',
  'POST /servers/{id}/exec': 'server.exec',
  'GET /servers/{id}/files': ['server.files.read', 'server.files.list', 'server.files.download'],
  'PUT /servers/{id}/files': 'server.files.write',
  'DELETE /servers/{id}/files': 'server.files.remove',
  'POST /servers/{id}/files/archive': 'server.files.upload',
  'POST /servers/{id}/checkpoints': 'server.checkpoint',
  'GET /servers/{id}/checkpoints': 'server.checkpoints',
  'DELETE /servers/{id}/checkpoints/{cid}': 'server.deleteCheckpoint',
  'POST /servers/{id}/restore': 'server.restore',
  'POST /servers/{id}/fork': 'server.fork',
  'GET /account/recharge': 'rootbox.rechargeInfo',
  'POST /account/recharge': 'rootbox.recharge',
  'POST /feedback': 'rootbox.feedback',
  'POST /mcp': { leftOut: 'the MCP endpoint is for MCP clients (an agent framework speaks it itself); each of its tools is an SDK method already' },
} as const satisfies Record<string, string | readonly string[] | { leftOut: string }>;

/** Field names of the schemas (components.schemas of the document) the SDK reads or sends, in
 *  full; `Name.field[]` is the items of an array field, `Name.field` a nested object. */
export const FIELDS = {
  Error: ['error', 'detail', 'retry_after'],
  UpgradeEnvelope: [
    'upgrade_required',
    'reason',
    'upgrade_url',
    'message',
    'error',
    'detail',
    'suspended',
    'server',
    'servers',
    'credits',
    'api_key',
    'account_note',
  ],
  PaymentRequired: ['x402Version', 'resource', 'accepts', 'error', 'detail'],
  'PaymentRequired.resource': ['url', 'description', 'mimeType'],
  Server: ['id', 'subdomain', 'state', 'never_sleep', 'suspended', 'flag', 'exposed_ports', 'usage', 'credits'],
  'Server.usage': ['disk_mb_used', 'domains'],
  CreateResponse: [
    'id',
    'subdomain',
    'state',
    'never_sleep',
    'suspended',
    'flag',
    'exposed_ports',
    'usage',
    'credits',
    'ssh',
    'ssh_private_key',
    'api_key',
    'subdomain_note',
    'account_note',
  ],
  'CreateResponse.usage': ['disk_mb_used', 'domains'],
  Credits: ['tier', 'ram_gb_hours_left', 'egress_gb_left', 'balance_usd', 'checkpoint_bytes'],
  UsagePage: ['entries', 'next_cursor'],
  'UsagePage.entries[]': ['kind', 'server', 'from', 'to', 'ram_gb_hours', 'disk_gb_months', 'checkpoint_gb_months', 'egress_gb', 'usd', 'source'],
  ExposedPort: ['public', 'container_port', 'protocol'],
  Domain: ['domain', 'server', 'state', 'reason', 'records', 'created_at', 'checked_at', 'active_at'],
  'Domain.records[]': ['type', 'name', 'value'],
  ExecAnswer: ['exit_code', 'signal', 'stdout', 'stderr', 'truncated', 'timed_out', 'ms'],
  FileList: ['path', 'entries', 'truncated'],
  'FileList.entries[]': ['name', 'type', 'size', 'mode', 'mtime'],
  Written: ['path', 'size'],
  RechargeInfo: ['how', 'endpoint', 'method', 'body', 'payments_configured', 'verify_phone_instead', 'credits'],
  'RechargeInfo.body': ['usd'],
  RechargeResult: ['ok', 'credited_usd', 'settlement', 'detail', 'credits'],
  Checkpoint: ['id', 'server_id', 'created_at', 'size_bytes', 'kind', 'comment'],
  CheckpointList: ['checkpoints'],
  // answers that are no named schema: "METHOD /path" (its 200 JSON answer; ` ndjson`: the lines of its NDJSON answer)
  'GET /servers': ['servers'],
  'GET /servers/{id}/domains': ['domains'],
  'GET /servers/{id}/logs': ['lines', 'events', 'oom_kills'],
  'GET /servers/{id}/logs.events[]': ['at', 'source', 'kind', 'message', 'status', 'in_seconds'],
  'POST /account/rotate-key': ['api_key', 'tier'],
  'POST /servers/{id}/exec ndjson': ['stream', 'data', 'exit_code', 'signal', 'timed_out', 'ms'],
  'POST /servers/{id}/restore': ['ok', 'checkpoint'],
  // requests
  CreateRequest: ['subdomains', 'never_sleep'],
  ExecRequest: ['command', 'cwd', 'env', 'stdin', 'timeout'],
  ExposeRequest: ['server', 'port'],
  DomainRequest: ['domain'],
  RechargeRequest: ['usd'],
  FeedbackRequest: ['message', 'contact'],
  CheckpointRequest: ['comment'],
  RestoreRequest: ['checkpoint'],
  ForkRequest: ['checkpoint', 'slug'],
} as const;

/** Fields of those schemas the SDK deliberately neither sends nor reads, with why. */
export const LEFT_OUT_FIELDS: Record<string, string> = {
  'CreateRequest.phone': 'phone sign-up and login is a two-step SMS flow for people (POST /create with phone, then code); the SDK works with an api_key',
  'CreateRequest.code': 'the second step of the same SMS flow',
};

/** Answers (a schema, or "METHOD /path") the SDK hands over as the API sent them, with why.
 *  An answer that is only `{ok: true}` needs no entry: the SDK's method returns nothing. */
export const UNTYPED: Record<string, string> = {
  Landing: "info() answers the host's offer (prices, grants, links) as the API sends it",
  'GET /openapi.json': 'openapi() answers the OpenAPI document itself',
  'GET /healthz': 'health() answers true once the API answers',
  VerificationRequired: "the answer of phone sign-up's first step, which the SDK leaves out (LEFT_OUT_FIELDS)",
  'PaymentRequired.accepts[]': 'the x402 terms, handed as they are to an x402 signer (PaymentRequiredError.accepts)',
};

/** Query parameters the SDK sends, by operation ("METHOD /path" → names). */
export const QUERY = {
  'GET /servers/{id}/logs': ['tail'],
  'GET /usage': ['limit', 'cursor'],
  'GET /servers/{id}/files': ['path', 'list', 'archive', 'gzip'],
  'PUT /servers/{id}/files': ['path', 'mode'],
  'DELETE /servers/{id}/files': ['path'],
  'POST /servers/{id}/files/archive': ['path'],
} as const;

/** `snake_case` → `camelCase`. */
export const camel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
/** `camelCase` → `snake_case`. */
export const snake = (s: string) => s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** An answer's keys in camelCase, at every depth (the API's objects carry no caller-chosen keys). */
export function fromWire<T>(v: unknown): T {
  if (Array.isArray(v)) return v.map((x) => fromWire(x)) as T;
  if (v === null || typeof v !== 'object') return v as T;
  const o: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) o[camel(k)] = fromWire(x);
  return o as T;
}

/** The body of a request of `schema` from camelCase options: only the schema's fields, undefined left out. */
export function toWire(schema: keyof typeof FIELDS, opts: Record<string, unknown>): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const f of FIELDS[schema]) {
    const v = opts[camel(f)];
    if (v !== undefined) body[f] = v;
  }
  return body;
}
