// The core slice of the config: identity of the host and how clients reach it (public URLs), listeners, TLS, logging, shutdown.

import { z } from 'zod';
import { bool, duration, port } from './fields.js';
import type { EnvBinding } from './env.js';
import { acmeEnv, acmeSchema } from './acme.js';

export const coreShape = {
  domain: z
    .string()
    .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/, 'must be a lowercase DNS name like example.com')
    .default('localhost')
    .describe('Domain the daemon serves: the hosting API on the apex and api., verification on verify., servers on <slug>.'),
  dataDir: z
    .string()
    .min(1)
    .default('./var')
    .describe('Directory for all state: LMDB, TLS material, secrets, images and server disks. Relative paths resolve against the working directory.'),
  runDir: z
    .string()
    .min(1)
    .default('/run/rootbox/daemons')
    .describe(
      "Directory where a running daemon writes a small file naming its data dir and admin socket (removed when it stops), so `bin/rootbox servers|accounts|status|backup` run outside the daemon's working directory find it. It must be owned by root (or the daemon's user), not a symlink and writable by no one else: otherwise nothing is written there and the commands refuse it.",
    ),
  publicIp: z
    .union([z.ipv4(), z.ipv6()], { error: 'must be an IPv4 or IPv6 address' })
    .optional()
    .describe('Public address written into ssh lines and exposed ports. Auto-detected from the first non-loopback interface; 127.0.0.1 when there is none.'),
  public: z
    .strictObject({
      scheme: z
        .enum(['http', 'https'])
        .optional()
        .describe(
          'Scheme of every absolute URL the daemon writes (upgrade_url, the recharge endpoint, OpenAPI `servers`, links in pages); their host comes from `domain` ({domain}, api.{domain}, verify.{domain}, <slug>.{domain}). Default: the scheme of the listener the request came in on.',
        ),
      port: z.coerce
        .number()
        .int()
        .min(1)
        .max(65535)
        .optional()
        .describe(
          "Port of those URLs, left out when it is the scheme's default (80, 443). Default: the port the client named in its Host header, so a daemon reached at http://api.localhost:28080 writes :28080 (a Host without a port means the default port, as behind a port mapping); the listener's own port when no Host was sent.",
        ),
      sshHost: z
        .string()
        .regex(/^([a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|[0-9a-f:.]+)$/i, 'must be a DNS name or an IP address')
        .optional()
        .describe('Host written into the `ssh` line of POST /create (`root@<host>`). Default: `publicIp`.'),
    })
    .prefault({}),
  http: z
    .strictObject({
      host: z.string().default('0.0.0.0').describe('Address the plain HTTP listener binds.'),
      port: port().default(8080).describe('Plain HTTP port. 0 picks a free port.'),
      redirect: bool()
        .prefault(false)
        .describe(
          'Production mode: answer every plain HTTP request with a redirect to HTTPS. Off with the embedded defaults, where HTTP serves everything directly.',
        ),
      maxConnectionsPerAddress: z.coerce
        .number()
        .int()
        .min(1)
        .default(128)
        .describe(
          'Connections one source (an IPv4 address or an IPv6 /64) may hold open to the HTTP and HTTPS listeners together; one more is closed at once (over plain HTTP after a 429 {error, detail}).',
        ),
      maxConnections: z.coerce
        .number()
        .int()
        .min(1)
        .default(10000)
        .describe(
          "Connections the HTTP and HTTPS listeners hold open together, from all sources. When it is reached, a new connection still gets in while some holder (an IPv4 address, or an IPv6 /56) holds at least two more connections than its own: the oldest of that holder's connections waiting for a request head (idle kept-alive, or head or TLS handshake pending) or HTTP/2 sessions with no stream open is closed for it — never one mid-request, a WebSocket or an HTTP/2 session with a stream open. Otherwise the new one is closed at once (over plain HTTP after a 503 {error, detail}).",
        ),
      headerTimeout: duration()
        .prefault('10s')
        .describe(
          'Time a connection has to send a complete request head, from its opening (TLS handshake included) and, on HTTP/1.1, from the end of its previous answer; then it is closed (408 when a head was under way).',
        ),
    })
    .prefault({}),
  https: z
    .strictObject({
      host: z.string().default('0.0.0.0').describe('Address the HTTPS listener binds.'),
      port: port().default(8443).describe('HTTPS port (HTTP/2 and HTTP/1.1). 0 picks a free port.'),
      cert: z
        .string()
        .optional()
        .describe('PEM certificate chain for {domain} and *.{domain}. Without cert and key, a local CA and certificates are generated under dataDir/tls.'),
      key: z.string().optional().describe('PEM private key matching `https.cert`.'),
      maxStreamResets: z.coerce
        .number()
        .int()
        .min(1)
        .default(100)
        .describe(
          'HTTP/2 streams a client may reset on one connection at once, and again per `https.streamResetWindow` (rapid reset); one more ends the connection with GOAWAY ENHANCE_YOUR_CALM.',
        ),
      streamResetWindow: duration().prefault('10s').describe('Time over which `https.maxStreamResets` resets are allowed again.'),
      acme: acmeSchema,
    })
    .prefault({}),
  ssh: z
    .strictObject({
      host: z.string().default('0.0.0.0').describe('Address the SSH listener binds.'),
      port: port().default(2222).describe("SSH port of the daemon's own SSH server."),
      maxAuthFailures: z.coerce
        .number()
        .int()
        .min(1)
        .default(10)
        .describe(
          'Failed SSH logins one source address may make per `ssh.authFailureWindow`; after that, until the window ends, its attempts other than a valid key end the connection at once (a valid key still logs in).',
        ),
      authFailureWindow: duration().prefault('5m').describe('Window over which failed SSH logins per source address are counted.'),
      loginGraceTime: duration()
        .prefault('30s')
        .describe('Time from accepting an SSH connection until it must have authenticated; then its socket is destroyed, whatever state the handshake is in.'),
      maxUnauthenticatedPerAddress: z.coerce
        .number()
        .int()
        .min(1)
        .default(10)
        .describe(
          'SSH connections not yet authenticated that one source (an IPv4 address or an IPv6 /64) may hold at once; more are closed on accept, before any handshake.',
        ),
      maxUnauthenticated: z.coerce
        .number()
        .int()
        .min(1)
        .default(256)
        .describe(
          "SSH connections not yet authenticated the listener holds at once, from all sources. When it is reached, a new connection still gets in while some holder (an IPv4 address, or an IPv6 /56) holds at least two more unauthenticated connections than its own: that holder's oldest unauthenticated connection is closed for it. Otherwise the new one is closed on accept.",
        ),
      maxChannels: z.coerce
        .number()
        .int()
        .min(1)
        .default(20)
        .describe('Channels (sessions and `ssh -L` forwards) one SSH connection may have open at once; one more is refused with the reason.'),
      maxExecs: z.coerce
        .number()
        .int()
        .min(1)
        .default(10)
        .describe(
          'Commands (shell, exec, sftp) one SSH connection may run at once; each is a `runc exec` on the host. One more gets the reason on stderr and exit status 1.',
        ),
      maxExecsPerServer: z.coerce
        .number()
        .int()
        .min(1)
        .default(40)
        .describe(
          "Commands (shell, exec, sftp) one server may run at once over all its SSH connections (each `runc exec` costs host memory outside the server's limit). One more gets the reason on stderr and exit status 1.",
        ),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z.enum(['debug', 'info', 'warn', 'error']).default('info').describe('Lowest level written to stdout.'),
    })
    .prefault({}),
  shutdownTimeout: duration().prefault('10s').describe('How long SIGTERM waits for in-flight requests before closing them.'),
};

export const coreEnv: EnvBinding[] = [
  { env: 'ROOTBOX_DOMAIN', path: 'domain' },
  { env: 'ROOTBOX_DATA_DIR', path: 'dataDir' },
  { env: 'ROOTBOX_RUN_DIR', path: 'runDir' },
  { env: 'ROOTBOX_PUBLIC_IP', path: 'publicIp' },
  { env: 'ROOTBOX_PUBLIC_SCHEME', path: 'public.scheme' },
  { env: 'ROOTBOX_PUBLIC_PORT', path: 'public.port' },
  { env: 'ROOTBOX_PUBLIC_SSH_HOST', path: 'public.sshHost' },
  { env: 'ROOTBOX_HTTP_HOST', path: 'http.host' },
  { env: 'ROOTBOX_HTTP_PORT', path: 'http.port' },
  { env: 'ROOTBOX_HTTP_REDIRECT', path: 'http.redirect' },
  { env: 'ROOTBOX_HTTPS_HOST', path: 'https.host' },
  { env: 'ROOTBOX_HTTPS_PORT', path: 'https.port' },
  { env: 'ROOTBOX_TLS_CERT', path: 'https.cert' },
  { env: 'ROOTBOX_TLS_KEY', path: 'https.key' },
  ...acmeEnv,
  { env: 'ROOTBOX_SSH_HOST', path: 'ssh.host' },
  { env: 'ROOTBOX_SSH_PORT', path: 'ssh.port' },
  { env: 'ROOTBOX_SSH_MAX_AUTH_FAILURES', path: 'ssh.maxAuthFailures' },
  { env: 'ROOTBOX_SSH_AUTH_FAILURE_WINDOW', path: 'ssh.authFailureWindow' },
  { env: 'ROOTBOX_SSH_LOGIN_GRACE_TIME', path: 'ssh.loginGraceTime' },
  { env: 'ROOTBOX_SSH_MAX_UNAUTHENTICATED_PER_ADDRESS', path: 'ssh.maxUnauthenticatedPerAddress' },
  { env: 'ROOTBOX_SSH_MAX_UNAUTHENTICATED', path: 'ssh.maxUnauthenticated' },
  { env: 'ROOTBOX_SSH_MAX_CHANNELS', path: 'ssh.maxChannels' },
  { env: 'ROOTBOX_SSH_MAX_EXECS', path: 'ssh.maxExecs' },
  { env: 'ROOTBOX_SSH_MAX_EXECS_PER_SERVER', path: 'ssh.maxExecsPerServer' },
  { env: 'ROOTBOX_LOG_LEVEL', path: 'log.level' },
  { env: 'ROOTBOX_SHUTDOWN_TIMEOUT', path: 'shutdownTimeout' },
];
