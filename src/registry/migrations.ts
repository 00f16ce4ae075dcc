// The registry's schema, versioned. `rootbox cluster init` applies every migration this rootbox
// knows, in order, each in its own transaction under one advisory lock (two hosts initialising at
// once apply each step once); a host at start only checks: it refuses a registry whose schema is
// newer than it knows (an older rootbox must not write records it does not understand) and one
// with no schema yet (the operator runs init once, on purpose).

import { AppError } from '../errors.js';
import { ACCOUNTS_SQL } from './accounts.js';
import { ACCOUNT_KEYS_SQL, DOMAINS_SQL, PLACEMENTS_SQL, SHARED_MAPS_SQL } from './feed-history.js';
import { FEED_SQL, LIVE_INDEX_SQL, TOMBSTONES_SQL } from './feed.js';
import { CHECKPOINT_BYTES_SQL, CHECKPOINT_LEDGER_SQL, LEDGER_SQL } from './ledger.js';
import { ORDERS_SQL, SHARED_SQL } from './shared.js';
import { IDENTITY_SQL } from './identity.js';
import { TOKEN_SQL } from './token.js';
import { QUOTAS_SQL } from './quotas.js';
import { HEARD_SQL } from './hosts.js';
import { RECOVERY_SQL } from './recoveries.js';
import { SETTINGS_SQL, SETTINGS_SUSPENSION_SQL } from './settings.js';
import { DRAIN_SQL } from './drains.js';
import type { RegistryPool } from './pool.js';

export interface Migration {
  version: number;
  about: string;
  sql: string;
}

/** Key of the advisory lock migrations run under (any constant unique to rootbox). */
const MIGRATE_LOCK = 0x726f6f74;

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    about: 'hosts: name, where the others reach it, capacity, heartbeat and lease',
    sql: `
      CREATE TABLE hosts (
        name          text PRIMARY KEY,
        advertise     text NOT NULL,
        public_ip     text NOT NULL,
        capacity      jsonb NOT NULL DEFAULT '{}'::jsonb,
        version       text NOT NULL,
        started_at    timestamptz NOT NULL,
        heartbeat_at  timestamptz NOT NULL,
        lease_until   timestamptz NOT NULL
      );`,
  },
  {
    version: 2,
    about: 'names and placement: slugs unique across hosts, each server placed on one host with an epoch',
    sql: `
      CREATE TABLE slugs (
        slug        text PRIMARY KEY,
        server_id   text NOT NULL,
        host        text NOT NULL,
        claimed_at  timestamptz NOT NULL DEFAULT now()
      );
      CREATE INDEX slugs_host ON slugs (host);
      CREATE TABLE placements (
        server_id   text PRIMARY KEY,
        host        text NOT NULL,
        epoch       bigint NOT NULL,
        account_id  text NOT NULL,
        slug        text NOT NULL,
        public_ip   text NOT NULL,
        placed_at   timestamptz NOT NULL DEFAULT now()
      );
      CREATE INDEX placements_host ON placements (host);`,
  },
  {
    version: 3,
    about: 'payment locks: an x402 payment is used once across every host',
    sql: `
      CREATE TABLE payment_locks (
        key        text PRIMARY KEY,
        host       text NOT NULL,
        state      text NOT NULL,
        locked_at  timestamptz NOT NULL DEFAULT now()
      );`,
  },
  {
    version: 4,
    about: 'accounts: api-key hashes, phones, revoked keys, pending SMS codes and send counters, the cluster secret',
    sql: ACCOUNTS_SQL,
  },
  {
    version: 5,
    about: 'money: an append-only ledger written once per key, per-account balance and usage totals',
    sql: LEDGER_SQL,
  },
  {
    version: 6,
    about: "shared records: certificates (keys sealed under a cluster secret), custom domains unique, servers' SSH keys by fingerprint",
    sql: SHARED_SQL,
  },
  {
    version: 7,
    about: 'placement versions: every placement and slug change numbered, deletes kept as tombstones, each change notified',
    sql: PLACEMENTS_SQL,
  },
  {
    version: 8,
    about: 'the cluster CA: the certificate and key every host signs its channel certificate with',
    sql: `
      CREATE TABLE cluster_ca (
        id          int PRIMARY KEY CHECK (id = 1),
        name        text NOT NULL,
        cert_pem    text NOT NULL,
        key_pem     text NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now()
      );
      REVOKE ALL ON cluster_ca FROM PUBLIC;`,
  },
  {
    version: 11,
    about: 'custom domain versions: every claim, state change and detach numbered with the placements, detaches kept as tombstones, each change notified',
    sql: DOMAINS_SQL,
  },
  {
    version: 12,
    about:
      "server key and HTTP-01 answer versions: every server's SSH key and every order's challenge token written or removed numbered with the placements, removals kept as tombstones, each change notified",
    sql: SHARED_MAPS_SQL,
  },
  {
    version: 13,
    about:
      'host identity: the instance (data dir) and run holding each host name, the instance that wrote each placement and claim, placements of a replaced instance marked lost',
    sql: IDENTITY_SQL,
  },
  {
    version: 14,
    about: "the cluster token: its verifier, every secret sealed under it (cluster secrets, the CA's key), each host's registered channel key",
    sql: TOKEN_SQL,
  },
  {
    version: 15,
    about: 'limits across hosts: reservations of servers in creation and of running commands per account and address, shared request-rate buckets',
    sql: QUOTAS_SQL,
  },
  {
    version: 16,
    about:
      "certificate order leases (one orderer at a time without a connection held across the order); each host's catch-up version and the floor below which tombstones were pruned; accounts' key hashes numbered with the placements (every host knows every key)",
    sql: ORDERS_SQL + TOMBSTONES_SQL + ACCOUNT_KEYS_SQL,
  },
  {
    version: 17,
    about:
      "one change feed: every followed record's last change (kind, key, version, payload; none once deleted) in one table written by one trigger function, instead of a version column per table, placement_tombstones and three triggers",
    sql: FEED_SQL,
  },
  {
    version: 18,
    about: "an index of the change feed's live records alone: a full load reads no tombstone (placement tombstones are kept for the wake fence)",
    sql: LIVE_INDEX_SQL,
  },
  {
    version: 19,
    about: 'checkpoint storage in the ledger: GB-months of it in every usage entry and in the account totals',
    sql: CHECKPOINT_LEDGER_SQL,
  },
  {
    version: 21,
    about:
      "hosts: each host's view of the channel (how long ago it last reached each other host), written with its heartbeat: a host is dead only when no peer reached it for cluster.recoverAfter",
    sql: HEARD_SQL,
  },
  {
    version: 22,
    about: "checkpoint bytes stored now per server, written by the host that holds it: an account's /credits sums every host's",
    sql: CHECKPOINT_BYTES_SQL,
  },
  {
    version: 23,
    about: "a host's drain mark and progress in its hosts row: it takes no creates and its servers move to the others (rootbox cluster drain / undrain)",
    sql: DRAIN_SQL,
  },
  {
    version: 24,
    about:
      "recovery of a dead host's servers: one recovery lease (one host recovers at a time), when each host last saw each of its servers running (server_activity), and each server's recovery outcome (recovered where, unrecoverable, failed)",
    sql: RECOVERY_SQL,
  },
  {
    version: 25,
    about:
      "servers' settings outside their disks and other records (never_sleep, exposed container ports), written by the host that runs each on every change: a recovery brings them back without the dead host",
    sql: SETTINGS_SQL,
  },
  {
    version: 29,
    about: "servers' suspension in their settings (suspended, flag): an operator's suspension outlasts a recovery on another host",
    sql: SETTINGS_SUSPENSION_SQL,
  },
];

export const KNOWN_VERSION = MIGRATIONS[MIGRATIONS.length - 1].version;

/** The schema version the registry is at; 0 when rootbox never initialised it. */
export async function schemaVersion(pool: RegistryPool): Promise<number> {
  const has = await pool.query<{ t: string | null }>(`SELECT to_regclass('rootbox_schema')::text AS t`);
  if (!has.rows[0]?.t) return 0;
  const r = await pool.query<{ v: number | null }>('SELECT max(version) AS v FROM rootbox_schema');
  return r.rows[0]?.v ?? 0;
}

/** Applies what is missing; answers the versions applied now (empty when it was current). */
export async function migrate(pool: RegistryPool): Promise<number[]> {
  return pool.tx(async (c) => {
    await c.query('SELECT pg_advisory_xact_lock($1)', [MIGRATE_LOCK]);
    await c.query('CREATE TABLE IF NOT EXISTS rootbox_schema (version int PRIMARY KEY, about text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
    const have = new Set((await c.query<{ version: number }>('SELECT version FROM rootbox_schema')).rows.map((r) => r.version));
    const unknown = unknownVersions(have);
    if (unknown.length) throw tooNew(Math.max(...unknown), unknown);
    const applied: number[] = [];
    // by set, not from the highest: a version missing below it (added out of order) still applies
    for (const m of MIGRATIONS) {
      if (have.has(m.version)) continue;
      await c.query(m.sql);
      await c.query('INSERT INTO rootbox_schema (version, about) VALUES ($1, $2)', [m.version, m.about]);
      applied.push(m.version);
    }
    return applied;
  });
}

/** Refuses a registry this rootbox must not use: no schema, or a newer one. */
export async function assertUsable(pool: RegistryPool): Promise<number> {
  const v = await schemaVersion(pool);
  if (v === 0) throw AppError.of('registry_not_initialized', `the registry at ${pool.where} has no rootbox schema: run \`rootbox cluster init\` once`);
  const have = await versions(pool);
  const unknown = unknownVersions(have);
  if (unknown.length) throw tooNew(Math.max(...unknown), unknown);
  const missing = MIGRATIONS.map((m) => m.version).filter((x) => !have.has(x));
  if (v < KNOWN_VERSION || missing.length)
    throw AppError.of(
      'registry_not_initialized',
      `the registry is at schema ${v}, this rootbox needs ${KNOWN_VERSION}${missing.length ? ` (missing: ${missing.join(', ')})` : ''}: run \`rootbox cluster init\``,
    );
  return v;
}

async function versions(pool: RegistryPool): Promise<Set<number>> {
  const r = await pool.query<{ version: number }>('SELECT version FROM rootbox_schema');
  return new Set(r.rows.map((x) => x.version));
}

/** Versions applied to the registry that this rootbox does not know (by set, not by the highest:
 *  versions are numbered by the branch that wrote them, so one below the highest known may be
 *  newer than this build). */
function unknownVersions(have: Set<number>): number[] {
  return [...have].filter((v) => !MIGRATIONS.some((m) => m.version === v)).sort((a, b) => a - b);
}

const tooNew = (v: number, unknown: number[] = [v]) =>
  AppError.of(
    'registry_too_new',
    `the registry is at schema ${v}, with ${unknown.length === 1 ? 'a change' : 'changes'} (${unknown.join(', ')}) this rootbox does not know (it knows up to ${KNOWN_VERSION}): upgrade rootbox on this host`,
  );
