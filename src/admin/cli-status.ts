// `rootbox status`, `rootbox backup FILE`, `rootbox restore FILE`.
// status comes from the daemon, or from the store and the host while it is stopped. backup is
// taken by the CLI process itself (a read-only LMDB copy beside the daemon, which keeps serving;
// src/store/backup.ts). restore refuses while a daemon answers on the admin socket or any
// process has the store open, then swaps the backup in (the old db is kept beside it).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { hostName } from '../config/index.js';
import { registryFacts, type RegistryFacts } from '../registry/index.js';
import { backupStore, restoreStore, SCHEMA_VERSION } from '../store/index.js';
import type { CliFlags, CliOut } from './cli-io.js';
import { ask, assertStoreFree, ok, withStore } from './cli-link.js';
import { registryPool } from './cli-io.js';
import { adminSocketPath } from './server.js';
import { statusView, type StatusView } from './status.js';
import { bytes } from './table.js';

function duration(s: number): string {
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
}

/** ", unavailable now: why" when the running daemon's payments part says so (the paid routes answer 503). */
function unavailable(dmn: StatusView['daemon']): string {
  const p = dmn.running ? (dmn.parts.payments as { available?: boolean; problems?: string } | undefined) : undefined;
  return p?.available === false ? `; unavailable now: ${p.problems ?? 'see the daemon log'}` : '';
}

function registryLine(r: RegistryFacts): string {
  if (!r.reachable)
    return `registry: ${r.registry} NOT reachable${r.error ? ` (${r.error})` : ''}; this host serves what it has, create and payments answer 503`;
  if (!r.schema) return `registry: ${r.registry} reachable, no schema (run rootbox cluster init)`;
  const lease =
    r.lease === 'running'
      ? `lease running (${r.lease_left_s} s left)`
      : r.lease === 'lapsed'
        ? `lease lapsed ${Math.round(-(r.lease_left_s ?? 0))} s ago`
        : 'not registered';
  return `registry: ${r.registry} reachable, schema ${r.schema} (this rootbox: ${r.schema_of_this_build}); host ${r.host} ${lease}; ${r.hosts_up} of ${r.hosts_total} hosts up; ${r.servers_here} servers placed here${drainPart(r.drain)}`;
}

/** This host's drain in the registry line: moved, left, failed (the why of each: `rootbox cluster status`). */
function drainPart(d: RegistryFacts['drain']): string {
  if (!d) return '';
  return `; draining since ${d.since.replace(/\.\d+Z$/, 'Z')}: ${d.moved} moved, ${d.left} left, ${d.failed} failed${d.failed ? ' (rootbox cluster status says why)' : ''}`;
}

function human(s: StatusView): string {
  const out: string[] = [];
  const dmn = s.daemon;
  if (dmn.running) {
    out.push(`daemon: running, pid ${dmn.pid}, node ${dmn.node}, up ${duration(dmn.uptime_s)}`);
    const parts = Object.entries(dmn.parts).map(([name, p]) => {
      const where = Object.entries(p)
        .filter(([k]) => k !== 'up')
        .map(([k, v]) => `${k} ${v}`)
        .join(', ');
      return where ? `${name} (${where})` : name;
    });
    out.push(`  parts up: ${parts.join('; ')}`);
  } else out.push(`daemon: not running (${dmn.detail})`);
  const st = s.store;
  out.push(
    `store: ${st.path}, schema ${st.schema_version} (this rootbox: ${st.schema_version_of_this_build}), ${bytes(st.bytes)}, ${st.accounts} accounts, ${st.servers} servers, ${st.feedback} feedback`,
  );
  const by = Object.entries(s.servers.by_state)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  out.push(`servers: ${s.servers.total}${by ? ` (${by})` : ''}; suspended ${s.servers.suspended}; never_sleep ${s.servers.never_sleep}`);
  const h = s.host;
  out.push(
    `memory: ${bytes(h.memory.available_bytes)} available of ${bytes(h.memory.total_bytes)}; running servers may use up to ${bytes(s.servers.memory_ceiling_running_bytes)} (headroom ${bytes(h.memory_headroom_bytes)})`,
  );
  out.push(
    `disk: ${bytes(h.disk.free_bytes)} free of ${bytes(h.disk.total_bytes)} at ${h.disk.path}; server disks take ${bytes(s.servers.disk_allocated_bytes)} of ${bytes(s.servers.disk_ceiling_bytes)} allowed`,
  );
  if (s.registry) out.push(registryLine(s.registry));
  if (s.kept_aside.length)
    out.push(
      `kept aside: ${s.kept_aside.length} disk(s) of servers now on another host with writes newer than their newest checkpoint (${s.kept_aside.map((k) => `${k.server} ${k.slug}`).join(', ')}) in ${s.data_dir}/lost+found: see rootbox doctor`,
    );
  const c = s.certificate;
  out.push(
    c.error ? `certificate: ${c.file}: ${c.error}` : `certificate: ${c.source} ${c.file}, ${c.names?.join(' ')}, expires ${c.not_after} (${c.days_left} days)`,
  );
  const a = s.acme;
  if (a.configured)
    out.push(
      `acme: ${a.state}${a.not_after ? `, expires ${a.not_after} (${a.days_left} days)` : ''}${a.last_error ? `; last attempt failed: ${a.last_error}${a.not_after ? ' (still serving the previous certificate)' : ''}` : ''}${a.next_attempt ? `; next attempt ${a.next_attempt}` : ''}`,
    );
  if (s.domains.total)
    out.push(
      `domains: ${s.domains.total} (${Object.entries(s.domains.by_state)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')})`,
    );
  const cf = s.config;
  out.push(
    `payments (x402): ${cf.payments.configured ? `configured, ${cf.payments.network}, pay to ${cf.payments.pay_to}${unavailable(dmn)}` : 'not configured (verify.x402.payTo)'}`,
  );
  out.push(
    `llm: ${cf.llm.configured ? `configured, models ${cf.llm.models.join(', ')}, api key ${cf.llm.api_key_set ? 'set' : 'not set'}` : 'not configured (verify.llm.baseUrl and models)'}`,
  );
  out.push(`sms: ${cf.sms.provider}${cf.sms.configured ? '' : ' (not configured: Twilio account SID, auth token and sender)'}`);
  return out.join('\n');
}

/** With the daemon stopped, the CLI reads the registry itself (cluster mode only). */
async function offlineRegistry(cfg: Readonly<Config>): Promise<RegistryFacts | undefined> {
  const pool = registryPool(cfg);
  if (!pool) return undefined;
  try {
    return await registryFacts(pool, hostName(cfg.cluster.host), cfg.cluster.lease);
  } finally {
    await pool.end();
  }
}

export async function statusCommand(cfg: Readonly<Config>, flags: CliFlags, io: CliOut): Promise<number> {
  const a = await ask(cfg.dataDir, 'GET', '/status');
  let body: StatusView;
  if (a) body = ok(a);
  else {
    const registry = await offlineRegistry(cfg);
    body = await withStore(cfg, io, (v) => statusView({ ...v, cfg }, { running: false, detail: `no answer on ${adminSocketPath(cfg.dataDir)}` }, registry));
  }
  io.out(flags.json ? JSON.stringify(body, null, 2) : human(body));
  return 0;
}

const recordsLine = (r: Record<string, number>) =>
  ['accounts', 'servers', 'ledger', 'feedback', 'payments']
    .filter((k) => k in r)
    .map((k) => `${r[k]} ${k}`)
    .join(', ');

export async function backupCommand(cfg: Readonly<Config>, file: string, flags: CliFlags, io: CliOut): Promise<number> {
  const started = Date.now();
  const b = await backupStore(cfg.dataDir, file);
  const body = {
    ok: true,
    file: b.file,
    bytes: b.bytes,
    schema_version: b.schemaVersion,
    records: b.records,
    host_files: b.hostFiles,
    settling_journal_bytes: b.journalBytes,
    ms: Date.now() - started,
  };
  io.out(
    flags.json
      ? JSON.stringify(body, null, 2)
      : [
          `backed up the store of ${cfg.dataDir} to ${b.file}: ${bytes(b.bytes)}, schema ${b.schemaVersion}, ${recordsLine(b.records)} (${body.ms} ms)`,
          b.hostFiles
            ? `it carries this host's ${b.hostFiles} key and certificate files (secrets/host.key opens every checkpoint) and the settlement journal: keep it as private as the host, and not beside the checkpoints`
            : 'it carries no host key or certificate: no daemon has started on this data dir',
          'server disks are not in it: they come back from their checkpoints (`rootbox restore --from-backup FILE --store s3://…`; see README, Operating)',
        ].join('\n'),
  );
  return 0;
}

export async function restoreCommand(cfg: Readonly<Config>, file: string, flags: CliFlags, io: CliOut): Promise<number> {
  const dir = cfg.dataDir;
  if (await ask(dir, 'GET', '/status')) {
    throw AppError.of('daemon_running', `a daemon answers on ${adminSocketPath(dir)}; stop it first (systemctl stop rootbox), then restore`);
  }
  assertStoreFree(dir, 'restore');
  const r = await restoreStore(dir, file);
  const notes: string[] = [];
  if (r.keptAs) notes.push(`the store that was there is kept as ${r.keptAs}`);
  if (r.schemaVersion < SCHEMA_VERSION)
    notes.push(`its schema ${r.schemaVersion} is older than this rootbox's ${SCHEMA_VERSION}: the daemon migrates it when it starts`);
  if (r.hostFiles?.written.length) notes.push(`put back the host files it carries: ${r.hostFiles.written.join(', ')}`);
  if (r.hostFiles?.differ.length)
    notes.push(`kept this host's own ${r.hostFiles.differ.join(', ')} (the backup's differ: it is another host's backup, or they were replaced since)`);
  if (!existsSync(join(dir, 'secrets', 'host.key'))) {
    notes.push(
      `${join(dir, 'secrets', 'host.key')} is missing: copy it from the old host, or api keys cannot be handed back at phone login (they still authenticate)`,
    );
  }
  const body = { ok: true, data_dir: dir, schema_version: r.schemaVersion, records: r.records, kept_as: r.keptAs ?? null, notes };
  io.out(
    flags.json
      ? JSON.stringify(body, null, 2)
      : [`restored ${file} into ${join(dir, 'db')}: schema ${r.schemaVersion}, ${recordsLine(r.records)}`, ...notes].join('\n'),
  );
  return 0;
}
