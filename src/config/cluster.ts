// The cluster slice of the config (DESIGN part 6): unset `registry` is the single box — LMDB only,
// nothing else to run. With a PostgreSQL URL the host joins the cluster whose shared records live
// there, under its own unique `host` name, and registers where the others reach it.

import { hostname } from 'node:os';
import { z } from 'zod';
import type { EnvBinding } from './env.js';
import { bool, duration } from './fields.js';

const HOST_PORT = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s/]+):\d{1,5}$/;

export const clusterSchema = z
  .strictObject({
    registry: z
      .string()
      .regex(/^postgres(ql)?:\/\/\S+$/, 'must be a PostgreSQL URL: postgres://user:password@host:5432/rootbox')
      .optional()
      .describe(
        'The cluster registry: a PostgreSQL connection URL (postgres://user:password@host:5432/db, `?sslmode=require` for TLS). Name the primary and its standbys as libpq does (postgres://user:password@db1:5432,db2:5432/db): every connection (the daemon, every command) uses whichever of them takes writes (as libpq with target_session_attrs=read-write; a target_session_attrs in the URL is honoured), and looks again after a failure. Unset: this host is a single box, everything in its own LMDB. Its password is never logged.',
      ),
    host: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be 1 to 63 lowercase letters, digits and dashes, starting with a letter or digit')
      .optional()
      .describe(
        "This host's unique name in the cluster, held by one data dir (an instance id in its `cluster-instance` file and in the registry): a daemon whose name another live host holds, or that another data dir held, refuses to start (`host_name_taken`, `host_replace_needed`). Unset: the machine's hostname, lowercased, other characters as dashes.",
      ),
    replaceHost: bool()
      .default(false)
      .describe(
        "Take this host name over from the data dir that held it before (its lease run out: a lost disk, a rebuilt machine): that instance's servers are marked lost in the registry, nothing is deleted. For one start (`rootbox serve --replace-host`); a name another live host holds is never taken.",
      ),
    advertise: z
      .string()
      .regex(HOST_PORT, 'must be "host:port"')
      .optional()
      .describe(
        'Where the other hosts reach this host\'s cluster listener, "host:port" (registered in the registry). Default: publicIp with the port of `listen`.',
      ),
    listen: z
      .string()
      .regex(HOST_PORT, 'must be "host:port"')
      .default('0.0.0.0:7946')
      .describe(
        "Address of this host's host-to-host channel: mutual TLS with certificates from the cluster CA (`rootbox cluster init` makes it), carrying HTTP/2 and the raw lane (bodiless GET/HEAD as multiplexed streams, ALPN rootbox-lane/1), on which the other hosts forward requests for the servers this host runs. Its port is what `advertise` defaults to.",
      ),
    forwardConnectTimeout: duration()
      .prefault('2s')
      .describe(
        "Longest a connection to another host's channel may take; past it a request for a server there answers 503 host_unavailable. Open channels are pinged this often and must answer within it (a partition fails requests within about three times this).",
      ),
    forwardRetryBody: z.coerce
      .number()
      .int()
      .min(0)
      .default(1024 * 1024)
      .describe(
        'Bytes of a request body kept in memory while it is forwarded to another host, so that it can be sent again once when that host no longer runs the server (its cache was stale); a larger body is streamed and not retried.',
      ),
    forwardRetryPerSource: z.coerce
      .number()
      .int()
      .min(0)
      .default(8 * 1024 * 1024)
      .describe(
        'Bytes of request bodies kept for a retry (forwardRetryBody) that the clients of one source (an IPv4 address or an IPv6 /64) may hold at once, all their requests together; beyond it a body is streamed at once without a copy, and not retried.',
      ),
    forwardRetryTotal: z.coerce
      .number()
      .int()
      .min(0)
      .default(64 * 1024 * 1024)
      .describe(
        'Bytes of request bodies kept for a retry (forwardRetryBody) by this host at once, every source together; beyond it a body is streamed at once without a copy, and not retried.',
      ),
    token: z
      .string()
      .min(16, 'must be at least 16 characters (`rootbox cluster init` makes one of 48)')
      .optional()
      .describe(
        "The cluster token `rootbox cluster init` printed (and wrote to its token file): every host of a cluster needs it. The registry's secrets (the cluster CA's key, the keys of certificates, the secret api keys and codes are sealed with) are encrypted under keys derived from it, so the registry alone opens none of them; a host with a wrong token refuses to start. Prefer `tokenFile` or ROOTBOX_CLUSTER_TOKEN to writing it in the config file. Never logged.",
      ),
    tokenFile: z
      .string()
      .min(1)
      .optional()
      .describe(
        'A file holding the cluster token (mode 0600, owned by root), read at start when `token` is unset. Unset: `<dataDir>/cluster-token`, where `rootbox cluster init` writes the token it makes.',
      ),
    lease: duration()
      .prefault('15s')
      .describe(
        'How long a host counts as up after its last heartbeat; it heartbeats every third of this. A host whose lease ran out is shown down unless its channel still answers; a lease that ran out while the registry could not be reached is not counted until this long after it is back.',
      ),
    recoverAfter: duration()
      .prefault('2m')
      .describe(
        "How long a host's lease must have lapsed, with no peer reaching it over the channel for as long, before it counts as dead and its servers may be recovered on the other hosts from their newest checkpoint (issue 38). A host out of contact — reaching neither the registry nor a peer that itself reaches it — freezes its running servers after a quarter of this and stops them after half of it, so they are stopped well before anyone may recover them (a watchdog does the same once the daemon is gone while its containers run); one that hears every other host while none reaches the registry keeps serving (a registry outage everyone sees). 0: never automatically — only the operator recovers a host, with --force — and no self-fencing.",
      ),
    connectTimeout: duration().prefault('3s').describe('How long a connection to the registry may take before the registry counts as unreachable.'),
    statementTimeout: duration().prefault('5s').describe('Longest a registry statement may run; past it the call fails as registry_unavailable.'),
    tombstoneRetention: duration()
      .prefault('7d')
      .describe(
        "How long the registry keeps the record of a deleted custom domain, SSH key, slug or HTTP-01 token (a tombstone other hosts' caches catch up with) when some live host has not caught up past it; tombstones every live host has caught up past are pruned sooner. A host further behind reloads the whole map instead. Records of deleted placements are kept: they stop a host that was away from starting a deleted server.",
      ),
    drainConcurrency: z.coerce
      .number()
      .int()
      .min(1)
      .max(16)
      .default(2)
      .describe(
        'How many servers a draining host (`rootbox cluster drain HOST`) moves to the other hosts at once; each goes to the up host, not draining, with the most room for it.',
      ),
    drainRetry: duration()
      .prefault('30s')
      .describe(
        'How long a draining host waits before it tries again to move a server whose move failed (doubled after each further failure, at most 10 min); `rootbox cluster status` shows each such server with why.',
      ),
    certificatePoll: duration()
      .prefault('10s')
      .describe(
        "How often this host reads the registry for certificates other hosts ordered (a new or renewed one reaches this host's edge within this); a custom domain's change is read at once.",
      ),
  })
  .prefault({});

/** This host's name: the configured one, or the machine's hostname made a valid name. */
export function hostName(configured: string | undefined): string {
  return (
    configured ??
    (hostname()
      .toLowerCase()
      .replace(/[^a-z0-9-]/g, '-')
      .replace(/^-+/, '')
      .slice(0, 63) ||
      'rootbox')
  );
}

export const clusterEnv: EnvBinding[] = [
  { env: 'ROOTBOX_REGISTRY', path: 'cluster.registry' },
  { env: 'ROOTBOX_HOST_NAME', path: 'cluster.host' },
  { env: 'ROOTBOX_REPLACE_HOST', path: 'cluster.replaceHost' },
  { env: 'ROOTBOX_CLUSTER_ADVERTISE', path: 'cluster.advertise' },
  { env: 'ROOTBOX_CLUSTER_LISTEN', path: 'cluster.listen' },
  { env: 'ROOTBOX_CLUSTER_TOKEN', path: 'cluster.token' },
  { env: 'ROOTBOX_CLUSTER_TOKEN_FILE', path: 'cluster.tokenFile' },
  { env: 'ROOTBOX_CLUSTER_RECOVER_AFTER', path: 'cluster.recoverAfter' },
];
