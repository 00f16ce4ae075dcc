// The catalogue of stable error codes: every `error` a client, an operator or the CLI can see,
// with its kind and what it means. Codes are what clients match on, so they never change meaning;
// AppError.of(code, …) takes its kind from here, and a code missing from this list does not
// compile. The kind decides the HTTP status in src/http/errors.ts (the status of each section is
// in its heading; test/foundation/catalogue.test.ts checks headings, kinds and uses). A code with
// `also` may be raised with one of those kinds instead (the caller names it): the same refusal
// said over another scheme or cap. Codes in the last sections are the host's own (start-up, CLI).

export type ErrorKind =
  | 'redirect'
  | 'bad_request'
  | 'unauthorized'
  | 'payment_required'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'request_timeout'
  | 'conflict'
  | 'too_large'
  | 'unsupported_media_type'
  | 'expectation_failed'
  | 'misdirected'
  | 'rate_limited'
  | 'header_too_large'
  | 'internal'
  | 'not_implemented'
  | 'upstream'
  | 'unavailable'
  | 'timeout'
  | 'version_not_supported'
  | 'insufficient_storage'
  | 'range_not_satisfiable';

export interface CatalogueEntry {
  readonly kind: ErrorKind;
  readonly also: readonly ErrorKind[];
  readonly about: string;
}

// (two signatures: with one generic signature, `also` left out would be inferred from the
// `satisfies` below as any kind at all)
function e<K extends ErrorKind>(kind: K, about: string): { kind: K; about: string; also: readonly [] };
function e<K extends ErrorKind, A extends readonly ErrorKind[]>(kind: K, about: string, also: A): { kind: K; about: string; also: A };
function e(kind: ErrorKind, about: string, also: readonly ErrorKind[] = []): CatalogueEntry {
  return { kind, about, also };
}

export const CATALOGUE = {
  // ── 308 redirect ──
  use_https: e('redirect', 'the plain HTTP listener redirects to the same URL over HTTPS'),

  // ── 400 bad_request ──
  bad_request: e('bad_request', 'the bytes received are not valid HTTP/1.1'),
  invalid_target: e('bad_request', 'the request target is not a path or absolute URL, or has bytes that cannot be forwarded'),
  invalid_header: e('bad_request', 'a request header line is malformed'),
  invalid_framing: e('bad_request', 'Content-Length, Transfer-Encoding or chunk sizes are invalid or ambiguous'),
  missing_host: e('bad_request', 'the request has no Host header'),
  duplicate_host: e('bad_request', 'the request has more than one Host header'),
  conflicting_host: e('bad_request', 'an HTTP/2 request names different hosts in :authority and Host'),
  upgrade_not_supported: e('bad_request', 'an upgrade that is not a WebSocket, or a WebSocket to a host that takes none', ['not_found']),
  invalid_request: e('bad_request', 'a body, query or path value fails its schema (the first `issues` listed)'),
  invalid_path: e('bad_request', 'a file path that is not absolute, has a NUL or `..`, or names the wrong kind of file (a directory where a file is wanted)'),
  invalid_archive: e('bad_request', 'an uploaded archive that tar cannot read'),
  invalid_json: e('bad_request', 'the request body is not JSON'),
  bad_path: e('bad_request', 'a static file path is malformed, too long or climbs above the site root'),
  invalid_phone: e('bad_request', 'a phone number is not E.164'),
  invalid_code: e('bad_request', 'a verification code is not 6 digits'),
  code_not_pending: e('bad_request', 'no verification code was sent to this number'),
  code_expired: e('bad_request', 'the verification code expired'),
  code_invalid: e('bad_request', 'the verification code is wrong'),
  sms_rejected: e('bad_request', 'the SMS provider refused the number'),
  invalid_amount: e('bad_request', 'an admin credit amount is not a positive number up to 1000000'),
  invalid_server_id: e('bad_request', 'a server id passed to the runtime is malformed'),
  invalid_slug: e('bad_request', 'a slug passed to the runtime is not a DNS label'),
  move_to_self: e('bad_request', 'a server moves to another host than the one that runs it: nothing changed'),
  invalid_memory: e('bad_request', 'a memory limit is under 32 MiB'),
  invalid_disk: e('bad_request', 'a disk limit is under 64 MiB'),
  invalid_argv: e('bad_request', 'a command to run in a server is empty'),
  invalid_domain: e('bad_request', "a server's own domain is not a host name that can carry a public certificate (IDN names become punycode)"),
  reserved_domain: e('bad_request', "a server's own domain is the service's domain or a name under it"),

  // ── 401 unauthorized ──
  missing_api_key: e('unauthorized', 'no Authorization: Bearer header'),
  invalid_api_key: e('unauthorized', 'the api key is malformed or belongs to no account'),
  revoked_api_key: e('unauthorized', 'the api key was replaced by a newer one'),

  // ── 402 payment_required ──
  payment_required: e('payment_required', 'pay with x402 and repeat the request (terms in PAYMENT-REQUIRED and the body)'),
  free_tier_exceeded: e('payment_required', 'the free grant is used up and there is no credit (the upgrade envelope)'),
  suspended: e('payment_required', 'the server is suspended until credit is added'),
  server_suspended: e('payment_required', 'the server a visitor asked for is paused: its account ran out of credit'),
  payment_invalid: e('payment_required', 'the payment header is missing, repeated or does not decode'),
  payment_too_large: e('payment_required', 'the payment header is too long'),
  payment_wrong_scheme: e('payment_required', 'the payment uses another scheme'),
  payment_wrong_network: e('payment_required', 'the payment is on another network'),
  payment_wrong_asset: e('payment_required', 'the payment is in another asset'),
  payment_wrong_recipient: e('payment_required', 'the payment pays someone else'),
  payment_wrong_amount: e('payment_required', 'the payment is for another amount'),
  payment_not_yet_valid: e('payment_required', 'the authorization is not valid yet'),
  payment_expired: e('payment_required', 'the authorization expired or expires too soon'),
  payment_window_too_long: e('payment_required', 'the authorization stays valid longer than accepted'),
  payment_signature_invalid: e('payment_required', 'the signature does not recover to the payer'),
  payment_already_used: e('payment_required', 'the authorization (nonce) was already used'),
  payment_rejected: e('payment_required', 'the facilitator rejected the payment'),
  payment_settlement_failed: e('payment_required', 'the facilitator could not settle the payment'),

  // ── 403 forbidden ──
  ip_limit: e('forbidden', 'anonymous accounts from this address hold their maximum of servers'),
  phone_required: e('forbidden', 'the option needs a verified phone'),
  server_limit: e('forbidden', 'the account holds its maximum of servers'),
  port_limit: e('forbidden', 'the server or account exposes its maximum of ports for its tier'),
  domain_limit: e('forbidden', "the account's servers carry the maximum of own domains for its tier (none for anonymous accounts)"),
  admin_denied: e('forbidden', 'the admin socket is root only (CLI)'),
  path_not_writable: e('forbidden', 'a file write where nothing may be written: a read-only or kernel file system (/proc, /sys) or a place not permitted'),

  // ── 404 not_found ──
  not_found: e('not_found', 'no route, or nothing published at this path'),
  unknown_host: e('not_found', 'the Host is none this daemon serves (421 over HTTPS)', ['misdirected']),
  file_not_found: e('not_found', 'no file or directory at this path inside the server'),
  server_not_found: e('not_found', 'the account has no such server, or the runtime does not know it'),
  unknown_server: e('not_found', 'no server has the slug a visitor asked for'),
  no_app: e('not_found', 'a WebSocket to a server that runs no app'),
  not_exposed: e('not_found', 'the port is not exposed'),
  domain_not_found: e('not_found', 'the server has no such own domain'),
  unknown_tier: e('not_found', 'no verification tier has this name'),
  unknown_target: e('not_found', 'no account or server for an admin command'),
  checkpoint_not_found: e('not_found', 'the server has no such checkpoint'),
  move_target_unknown: e('not_found', 'the cluster has no host of that name to move a server to'),
  recover_host_unknown: e('not_found', 'the cluster has no other host of that name to recover the servers of'),
  drain_host_unknown: e('not_found', 'the cluster has no host of that name to drain or undrain'),

  // ── 405 method_not_allowed ──
  method_not_allowed: e('method_not_allowed', 'the method is not allowed here (Allow lists those that are); CONNECT anywhere'),

  // ── 408 request_timeout ──
  request_timeout: e('request_timeout', 'the request head did not arrive in time'),
  body_timeout: e('request_timeout', "a request body to a server's app stopped arriving for longer than proxy.bodyIdleTimeout; the request was ended"),

  // ── 409 conflict ──
  subdomain_taken: e('conflict', 'every wanted subdomain is taken'),
  recover_host_live: e('conflict', "a host's servers are recovered only once its lease has lapsed: it still runs them"),
  recover_host_reached: e('conflict', 'a host a peer reached over the channel a moment ago may still run its servers: they are not recovered elsewhere'),
  recover_needs_force: e('conflict', 'with cluster.recoverAfter 0 no host fences itself: recovering a host whose containers may still run needs --force'),
  recovery_busy: e('conflict', "another recovery of a dead host's servers is under way (one host recovers at a time)"),
  phone_taken: e('conflict', 'another host verified the same phone for a new account at the same instant; log in with it'),
  expose_in_progress: e('conflict', 'another request is exposing the same port'),
  restore_in_progress: e('conflict', 'a restore of this server is under way (one at a time per server): retry once it has answered'),
  domain_taken: e('conflict', 'the domain is attached to another server (of another account, or another of yours)'),
  server_exists: e('conflict', 'the runtime already has a server with this id'),
  server_not_running: e('conflict', 'the server must be running for this'),
  image_in_use: e('conflict', 'servers use the base image, so it cannot be rebuilt in place (CLI)'),
  move_refused: e('conflict', 'the target host refused the server for a reason another try does not change (it has it, or takes no moved servers)'),
  move_in_progress: e('conflict', 'the server is being moved to another host already; wait for that move to end'),
  move_not_here: e('conflict', 'a move starts on the host that runs the server; this host does not (run the command there)'),
  move_target_draining: e('conflict', 'the target host is being drained (it takes no servers until `rootbox cluster undrain`): nothing changed'),
  move_target_full: e('conflict', 'the target host has no room for the server (memory, disk or its count of servers): nothing changed'),
  move_needs_shared_store: e('conflict', 'a move needs checkpoints in a store every host reaches (checkpoints.store = s3://…), not a host’s own directory'),
  placement_conflict: e('conflict', 'a placement changed since this host read it (another host or epoch): nothing was written'),

  // ── 413 too_large ──
  body_too_large: e('too_large', 'the request body exceeds the limit of its route'),

  // ── 415 unsupported_media_type ──
  unsupported_media_type: e('unsupported_media_type', 'the body is not JSON and declares a content type other than JSON'),

  // ── 416 range_not_satisfiable ──
  range_not_satisfiable: e('range_not_satisfiable', 'the Range of a file read lies outside the file (Content-Range says its size)'),

  // ── 417 expectation_failed ──
  expectation_failed: e('expectation_failed', 'an Expect other than 100-continue'),

  // ── 429 rate_limited ──
  rate_limited: e('rate_limited', 'too many requests from this address or account (Retry-After)'),
  sms_rate_limited: e('rate_limited', 'too many codes texted to this number or from this address (Retry-After)'),
  code_locked: e('rate_limited', 'too many wrong codes; the code is locked (Retry-After)'),
  issuance_rate_limited: e('rate_limited', 'the domain used its certificate orders of this hour (Retry-After)'),
  too_many_commands: e('rate_limited', 'the server or the account runs its maximum of commands at once (exec, files, SSH); wait for one to end'),
  too_many_app_requests: e('rate_limited', "this address holds its share of the connections to a server's app, and as many wait (Retry-After)"),
  checkpoint_limit: e('rate_limited', "the server holds its tier's maximum of manual checkpoints (checkpoints.manualPerServer); delete one to take another"),
  too_many_connections: e('rate_limited', 'this address holds its maximum of connections (503 when the host holds its total)', ['unavailable']),

  // ── 431 header_too_large ──
  header_too_large: e('header_too_large', 'the request head is larger than accepted'),

  // ── 500 internal ──
  internal: e('internal', 'a failure inside the host; the detail is a generic sentence with the request id'),
  nft_output: e('internal', 'nft printed something this daemon does not understand'),

  // ── 501 not_implemented ──
  unknown_method: e('not_implemented', 'a request method this server does not implement'),

  // ── 502 upstream ──
  app_down: e('upstream', "the server's app does not accept connections on port 80"),
  bad_gateway: e('upstream', "the server's app broke the connection or sent an invalid answer"),
  forward_loop: e('upstream', 'a request forwarded between hosts came back to a host it already passed (a misconfigured cluster.advertise, or a cycle)'),
  sms_failed: e('upstream', 'the SMS provider could not be reached or failed'),
  facilitator_unavailable: e('upstream', 'the x402 facilitator could not be reached; nothing was charged'),
  llm_failed: e('upstream', 'too few verifier passes completed because of language-model provider errors'),
  checkpoint_corrupt: e('upstream', 'a piece of the checkpoint is missing from the store or does not verify: nothing was restored, the server keeps its disk'),

  // ── 503 unavailable ──
  not_configured: e('unavailable', 'the feature is not configured on this host (SMS, payments, verification)'),
  at_capacity: e('unavailable', 'the host is out of memory or disk for new servers'),
  create_failed: e('unavailable', 'the server could not be created right now'),
  no_slug: e('unavailable', 'no free random subdomain was found'),
  port_pool_exhausted: e('unavailable', 'every public port is in use'),
  server_not_ready: e('unavailable', 'the server is being created or failed'),
  server_creating: e('unavailable', 'the server is still being created (Retry-After)'),
  app_busy: e('unavailable', "as many requests wait for a server's app as it may have connections, none of a larger share to give its place (Retry-After)"),
  wake_queue_full: e('unavailable', 'too many requests wait for this server to wake (Retry-After)'),
  wake_failed: e('unavailable', 'the server could not be started (Retry-After)'),
  no_address: e('unavailable', 'every address of the server subnet is in use'),
  no_uid_range: e('unavailable', 'every uid range of the host is in use'),
  host_unavailable: e('unavailable', 'the host that runs the server is down or cannot be reached from the host that received the request (Retry-After)'),
  move_target_down: e('unavailable', 'the target host of a move is down or cannot be reached over the channel: nothing changed (Retry-After)'),
  move_failed: e('unavailable', 'the move did not complete; the server stays on (or went back to) the host it was on, serving (Retry-After)'),
  server_moved: e('unavailable', 'the cluster registry places this server on another host: this host does not start it (Retry-After)'),
  move_unsettled: e('unavailable', 'another host was asked to take the server and whether it did is not known until the registry answers (Retry-After)'),
  host_fenced: e('unavailable', 'this host reaches neither the cluster registry nor another host: it starts no server until it does (Retry-After)'),
  registry_unavailable: e('unavailable', 'the cluster registry (PostgreSQL) cannot be reached: changes to shared records wait until it is back (Retry-After)'),
  store_unavailable: e('unavailable', 'the checkpoint store cannot be reached; servers keep running (Retry-After)'),
  store_busy: e('unavailable', 'a collection of unreferenced chunks holds the store: no checkpoint taken (Retry-After)'),
  payments_unavailable: e('unavailable', 'the facilitator lacks our network or refuses our key, or the chain or gas wallet is unusable'),

  // ── 504 timeout ──
  upstream_timeout: e('timeout', "the server's app did not accept the connection or answer in time"),
  wake_timeout: e('timeout', 'the server woke but its app did not answer on port 80 in time'),

  // ── 505 version_not_supported ──
  version_not_supported: e('version_not_supported', 'an HTTP version other than 1.x on the plain listener'),

  // ── 507 insufficient_storage ──
  disk_full: e('insufficient_storage', "a write reached the server's disk ceiling; an upload leaves nothing of itself, the server stays usable"),
  restore_no_room: e('insufficient_storage', 'the host has no room for the restored disk: nothing was restored, the server keeps its disk'),

  // ── 400 bad_request: the host's own set-up (start-up and CLI, never an HTTP answer) ──
  config_invalid: e('bad_request', 'the config file or environment is invalid'),
  config_unreadable: e('bad_request', 'the config file cannot be read'),
  tls_invalid: e('bad_request', 'the TLS certificate or key cannot be loaded'),
  not_a_backup: e('bad_request', 'a file given to rootbox restore is not a rootbox store backup'),
  no_store: e('bad_request', 'the data dir holds no store to back up or read'),
  no_host_key: e('bad_request', 'restore --from-backup: the backup carries no host key and --host-key gave none, so no checkpoint would open (CLI)'),
  store_empty: e('bad_request', 'restore --from-backup: the store holds none of the checkpoints the backup lists: another bucket or prefix (CLI)'),
  store_refused: e('bad_request', 'restore --from-backup: the checkpoint store refused the request (credentials, bucket, region) (CLI)'),
  store_key_mismatch: e('bad_request', "restore --from-backup: no checkpoint in the store opens with the backup's host key (CLI)"),
  cluster_token_missing: e('bad_request', 'cluster mode without the cluster token (cluster.token, ROOTBOX_CLUSTER_TOKEN or cluster.tokenFile)'),
  cluster_token_wrong: e('bad_request', "the cluster token is not the registry's (its verifier does not match): the host refuses to start and writes nothing"),

  // ── 409 conflict: the host's own set-up ──
  host_names_taken: e('conflict', "another live daemon holds this daemon's bridge, nft table, subnet, uid range, port pool, metrics port or data dir"),
  host_name_taken: e('conflict', "another live rootbox holds this host's cluster name (cluster.host): the start is refused, naming the holder's address"),
  host_replace_needed: e('conflict', "another data dir held this host's cluster name: refused without --replace-host (which marks its servers lost)"),
  join_conflict: e('conflict', "another host holds a box's key, phone, subdomain, domain or credit in the registry: its join is refused, each named"),
  data_dir_not_empty: e('conflict', 'rootbox restore --from-backup rebuilds a box into a fresh data dir only; the one given holds files (CLI)'),
  rebuild_incomplete: e('conflict', 'a restore --from-backup into this data dir was interrupted: the daemon does not start there until a rerun finishes it'),
  daemon_running: e('conflict', 'a daemon or another process holds the store, so the CLI does not write it (restore, offline credit) (CLI)'),

  // ── 500 internal: the host's own set-up ──
  admin_failed: e('internal', 'the daemon refused an admin command without a code (CLI)'),
  install_failed: e('internal', '`rootbox install` could not put the program, config or unit in place (CLI)'),
  image_build_failed: e('internal', 'debootstrap or apt failed building the base image'),
  ssh_host_key_invalid: e('internal', 'an SSH host key file is not a readable private key'),
  store_too_new: e('internal', 'the database was written by a newer rootbox'),
  registry_too_new: e('internal', 'the cluster registry has a schema newer than this rootbox knows (upgrade this host)'),

  // ── 503 unavailable: the host's own set-up ──
  image_missing: e('unavailable', 'the base image is not built'),
  registry_not_initialized: e('unavailable', 'the cluster registry has no rootbox schema yet (run rootbox cluster init)'),
  data_dir_untraversable: e('unavailable', "the data dir or image dir has an ancestor the servers' mapped uids cannot traverse (chmod o+x)"),
  helper_missing: e('unavailable', 'the idmapped-mount helper is not built'),
  lock_failed: e('unavailable', 'the host-name locks under /run/rootbox could not be taken'),
  native_missing: e('unavailable', 'the C sources of the native helpers are not found'),
  debootstrap_missing: e('unavailable', 'debootstrap is not installed'),
  listen_failed: e('unavailable', 'a listening port cannot be bound'),
  ssh_crypto_not_native: e('unavailable', "ssh2's native crypto binding is not loaded"),
  daemon_not_running: e('unavailable', 'an admin command that acts on running servers needs the daemon (CLI)'),
  acme_not_configured: e('unavailable', 'a certificate was asked of ACME but no https.acme.directory (or DNS-01 setting) is configured'),
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorCode = keyof typeof CATALOGUE;

/** The kinds a code may be raised with: its own, then its `also`. */
export type KindsOf<C extends ErrorCode> = (typeof CATALOGUE)[C]['kind'] | (typeof CATALOGUE)[C]['also'][number];

/** The codes whose kind is K (also through `also`). */
export type CodeOf<K extends ErrorKind> = { [C in ErrorCode]: K extends KindsOf<C> ? C : never }[ErrorCode];

export const isErrorCode = (s: unknown): s is ErrorCode => typeof s === 'string' && Object.hasOwn(CATALOGUE, s);

/** Whether `kind` is one a code may be raised with. */
export function kindAllowed(code: ErrorCode, kind: ErrorKind): boolean {
  const entry: CatalogueEntry | undefined = CATALOGUE[code];
  return entry !== undefined && (entry.kind === kind || entry.also.includes(kind));
}
