// A host name is an identity, not a label (issue 35). The name is held by one instance — the data
// dir that joined under it, known by an id kept in that data dir (`cluster-instance`) and in the
// hosts table — and within it by one run (this process) at a time. At start the host claims its
// name (`claimName`) before it writes anything else under it:
//   - a name nobody holds: taken;
//   - held by this instance: taken again (a restart); when its lease still runs under another run
//     (a kill -9 a moment ago, or a copy of this data dir running elsewhere) one heartbeat interval
//     is watched: a heartbeat in it means another live run holds it (refused, host_name_taken);
//   - held by another instance whose lease runs (two daemons, one name: a cloned VM keeps the
//     machine's hostname, the default name): refused, host_name_taken naming the holder's address;
//   - held by another instance whose lease ran out (a fresh data dir under a known name): refused,
//     host_replace_needed, unless the operator says --replace-host (`cluster.replaceHost`): then
//     that instance's placements are marked lost — never deleted — and the name is this one's;
//   - a row from before instances were recorded (no instance): adopted with its placements and
//     claims, unless its lease runs (an older daemon still up: host_name_taken).
// Nothing is written when the claim is refused.

import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { replaceFile } from '../durable.js';
import { AppError } from '../errors.js';
import type { HostFacts } from './hosts.js';
import type { RegistryPool } from './pool.js';

export const IDENTITY_SQL = `
  ALTER TABLE hosts ADD COLUMN instance text, ADD COLUMN run text;
  ALTER TABLE placements ADD COLUMN instance text, ADD COLUMN lost_at timestamptz;
  ALTER TABLE slugs ADD COLUMN instance text;`;

/** The file in the data dir that names this instance. */
export const INSTANCE_FILE = 'cluster-instance';

/** Who this host is: its instance (the data dir's id), this run, and whether the run holds the
 *  name in the registry now (claimed at start; lost when another instance took it over). */
export interface HostIdentity {
  readonly instance: string;
  readonly run: string;
  /** The data dir had no instance id before this run (made now). */
  readonly fresh: boolean;
  held: boolean;
}

/** This data dir's instance id, made (and synced) the first time. */
export function instanceOf(dataDir: string): { instance: string; fresh: boolean } {
  const path = join(dataDir, INSTANCE_FILE);
  const have = readInstance(dataDir);
  if (have) return { instance: have, fresh: false };
  const id = `ins_${randomBytes(16).toString('hex')}`;
  replaceFile(path, id + '\n'); // its directory flushed too: a power loss must not give the data dir a new id
  return { instance: id, fresh: true };
}

/** This data dir's instance id; undefined when it has none yet (nothing is made). */
export function readInstance(dataDir: string): string | undefined {
  const path = join(dataDir, INSTANCE_FILE);
  if (!existsSync(path)) return undefined;
  const id = readFileSync(path, 'utf8').trim();
  if (/^ins_[0-9a-f]{32}$/.test(id)) return id;
  throw AppError.of('config_invalid', `${INSTANCE_FILE} in the data dir does not hold an instance id; restore it from a backup or remove it`);
}

export function newIdentity(dataDir: string): HostIdentity {
  return { ...instanceOf(dataDir), run: `run_${randomBytes(8).toString('hex')}`, held: false };
}

interface Holder {
  instance: string | null;
  run: string | null;
  advertise: string;
  heartbeat_at: Date;
  live: boolean;
}

export interface ClaimOptions {
  leaseMs: number;
  /** The operator said --replace-host: a name held by another instance whose lease ran out is taken over. */
  replace: boolean;
}

/** What taking the name did: the placements of a replaced instance it marked lost. */
export interface Claimed {
  lost: number;
  replaced?: string;
}

const HOLDER = `SELECT instance, run, advertise, heartbeat_at, lease_until > now() AS live FROM hosts WHERE name = $1`;

const taken = (name: string, h: Holder) =>
  AppError.of(
    'host_name_taken',
    `the host name ${name} is held by another live rootbox at ${h.advertise} (a second machine under the same name, e.g. a cloned VM): give this host its own cluster.host (ROOTBOX_HOST_NAME)`,
  );

/** Claims this host's name for `id` (see the header); throws host_name_taken or host_replace_needed. */
export async function claimName(pool: RegistryPool, f: HostFacts, id: HostIdentity, o: ClaimOptions): Promise<Claimed> {
  const seen = (await pool.query<Holder>(HOLDER, [f.name])).rows[0];
  // the lease of this instance under another run: dead (a kill a moment ago) or alive (a copy of
  // this data dir): a live one heartbeats within one interval
  let deadRun: string | null = null;
  if (seen && seen.instance === id.instance && seen.live && seen.run !== id.run) {
    const interval = Math.max(250, Math.floor(o.leaseMs / 3));
    await sleep(interval + Math.min(2000, interval));
    const again = (await pool.query<Holder>(HOLDER, [f.name])).rows[0];
    if (again && again.run === seen.run && again.live && again.heartbeat_at.getTime() !== seen.heartbeat_at.getTime()) throw taken(f.name, again);
    deadRun = seen.run;
  }
  return pool.tx(async (c) => {
    const values = [f.name, f.advertise, f.publicIp, JSON.stringify(f.capacity), f.version, o.leaseMs, id.instance, id.run];
    const inserted = await c.query(
      `INSERT INTO hosts (name, advertise, public_ip, capacity, version, started_at, heartbeat_at, lease_until, instance, run)
       VALUES ($1, $2, $3, $4, $5, now(), now(), now() + make_interval(secs => $6::double precision / 1000), $7, $8)
       ON CONFLICT (name) DO NOTHING`,
      values,
    );
    if (inserted.rowCount === 1) return { lost: 0 };
    const h = (await c.query<Holder>(`${HOLDER} FOR UPDATE`, [f.name])).rows[0];
    let claimed: Claimed = { lost: 0 };
    if (h.instance === id.instance) {
      if (h.live && h.run !== id.run && h.run !== deadRun) throw taken(f.name, h);
    } else if (h.live) {
      throw taken(f.name, h);
    } else if (h.instance === null) {
      // written before instances were recorded: this host's own, adopted with what it placed
      await c.query('UPDATE placements SET instance = $2 WHERE host = $1 AND instance IS NULL', [f.name, id.instance]);
      await c.query('UPDATE slugs SET instance = $2 WHERE host = $1 AND instance IS NULL', [f.name, id.instance]);
    } else if (!o.replace) {
      const n = await c.query<{ n: string }>('SELECT count(*) AS n FROM placements WHERE host = $1 AND lost_at IS NULL', [f.name]);
      throw AppError.of(
        'host_replace_needed',
        `the registry knows the host name ${f.name} from another data dir (instance ${h.instance}, last at ${h.advertise}, ${n.rows[0].n} servers placed), not from this one${id.fresh ? ' (a fresh data dir)' : ''}: give this host its own cluster.host, or start it once with --replace-host to take the name over — that host's servers are then marked lost, nothing is deleted`,
      );
    } else {
      // taken over: the old instance's placements are lost (kept, never deleted); this instance's
      // own, lost when another took the name from it, are its own again
      const r = await c.query<{ lost: boolean }>(
        `UPDATE placements SET lost_at = CASE WHEN instance = $2 THEN NULL ELSE coalesce(lost_at, now()) END
         WHERE host = $1 AND (instance = $2 OR lost_at IS NULL) RETURNING lost_at IS NOT NULL AS lost`,
        [f.name, id.instance],
      );
      claimed = { lost: r.rows.filter((x) => x.lost).length, replaced: h.instance };
    }
    await c.query(
      `UPDATE hosts SET advertise = $2, public_ip = $3, capacity = $4, version = $5, started_at = now(), heartbeat_at = now(),
         lease_until = now() + make_interval(secs => $6::double precision / 1000),
         channel_key = CASE WHEN instance IS DISTINCT FROM $7 THEN NULL ELSE channel_key END, instance = $7, run = $8
       WHERE name = $1`,
      values,
    );
    return claimed;
  });
}
