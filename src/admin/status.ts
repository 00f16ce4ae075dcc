// `rootbox status`: the daemon (pid, Node version, uptime, its parts and where they listen) when it
// answers, the store (schema, size, record counts), servers by state with the memory and disk
// they are allowed, servers' own domains by state, the host's memory and disk headroom, the HTTPS certificate's expiry, and which
// of payments, LLM and SMS are configured; with ACME, the host certificate's state and last error;
// in cluster mode, the registry as this host sees it (reachable, schema, this host's lease, hosts
// up), the same facts in the registry part of the daemon's parts; disks kept aside in lost+found.
// Built by the daemon, or by the CLI from the store
// (daemon: {running: false}) while it is stopped.

import { statSync } from 'node:fs';
import { join } from 'node:path';
import { acmeFacts } from '../acme/index.js';
import type { Config } from '../config/index.js';
import type { RegistryFacts } from '../registry/index.js';
import { keptAside } from '../runtime/index.js';
import { SCHEMA_VERSION } from '../store/index.js';
import { certificateFacts, configFacts, hostFacts } from './host.js';
import { serverView, type ViewDeps } from './views.js';

export interface DaemonFacts {
  running: true;
  pid: number;
  /** process.version of the daemon's Node runtime. */
  node: string;
  uptime_s: number;
  /** Every part of the daemon is up once it answers (the admin channel starts last). */
  parts: Record<string, { up: true } & Record<string, unknown>>;
}

function size(path: string): number | null {
  try {
    return statSync(path).size;
  } catch {
    return null;
  }
}

export function statusView(d: ViewDeps & { cfg: Readonly<Config> }, daemon: DaemonFacts | { running: false; detail: string }, registry?: RegistryFacts) {
  const servers = d.store.servers.all().map((s) => serverView(d, s));
  const byState: Record<string, number> = {};
  for (const s of servers) byState[s.state] = (byState[s.state] ?? 0) + 1;
  const running = servers.filter((s) => s.state === 'running' || s.state === 'waking');
  const sum = (xs: (number | null)[]) => xs.reduce<number>((a, b) => a + (b ?? 0), 0);
  const host = hostFacts(d.cfg.dataDir);
  const committed = sum(running.map((s) => s.memory_bytes));
  return {
    daemon,
    data_dir: d.cfg.dataDir,
    store: {
      path: join(d.cfg.dataDir, 'db'),
      schema_version: d.store.schemaVersion,
      schema_version_of_this_build: SCHEMA_VERSION,
      bytes: size(join(d.cfg.dataDir, 'db', 'data.mdb')),
      accounts: d.store.accounts.all().length,
      servers: servers.length,
      feedback: d.store.feedback.count(),
    },
    servers: {
      total: servers.length,
      by_state: byState,
      suspended: servers.filter((s) => s.suspended).length,
      never_sleep: servers.filter((s) => s.never_sleep).length,
      memory_ceiling_running_bytes: committed,
      disk_ceiling_bytes: sum(servers.map((s) => s.disk_bytes)),
      disk_allocated_bytes: sum(servers.map((s) => s.disk_allocated_bytes)),
    },
    host: {
      ...host,
      /** Memory the host has left if every running server used its whole ceiling. */
      memory_headroom_bytes: host.memory.total_bytes - committed,
    },
    certificate: certificateFacts(d.cfg),
    /** ACME for {domain} + *.{domain}: state, expiry, last error (a failed renewal keeps the previous certificate). */
    acme: acmeFacts(d.cfg),
    /** Servers' own domains by state (pending_dns, issuing, active, failed). */
    domains: countBy(d.store.domains.all().map((x) => x.state)),
    config: configFacts(d.cfg),
    /** Cluster mode: the registry as this host sees it; null on a single box. */
    registry: registry ?? null,
    /** Disks of servers now placed on another host, kept aside at start in <dataDir>/lost+found
     *  because they held writes newer than their newest checkpoint (issue 38). */
    kept_aside: keptAside(d.cfg.dataDir).map((k) => ({
      server: k.server,
      slug: k.slug,
      placed_on: k.placedOn ?? null,
      disk_written_at: new Date(k.diskWrittenAt).toISOString(),
      image: k.image,
    })),
  };
}

/** The registry part of the daemon's parts: the same facts as status's registry section. */
export function registryPart(f: RegistryFacts) {
  return {
    up: true as const,
    reachable: f.reachable,
    schema: f.schema,
    lease: f.lease,
    hosts_up: f.hosts_up,
    ...(f.error ? { problems: f.error } : {}),
  };
}

/** The payments part of status: who settles, whether payments are configured and can be taken
 *  now, and why not. Without verify.x402.payTo nothing can be taken, whatever the health checks
 *  (which then never run) say, so the part and the config line below it agree. */
export function paymentsPart(cfg: Readonly<Config>, v: { settlement: string; available: boolean; problems: string[] }) {
  const configured = configFacts(cfg).payments.configured;
  const problems = configured ? v.problems : ['not configured (verify.x402.payTo)', ...v.problems];
  return {
    up: true as const,
    settlement: v.settlement,
    configured,
    available: configured && v.available,
    ...(problems.length ? { problems: problems.join('; ') } : {}),
  };
}

function countBy(keys: string[]): { total: number; by_state: Record<string, number> } {
  const by_state: Record<string, number> = {};
  for (const k of keys) by_state[k] = (by_state[k] ?? 0) + 1;
  return { total: keys.length, by_state };
}

export type StatusView = ReturnType<typeof statusView>;
