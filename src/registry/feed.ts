// The registry's change feed (schema 17, issue 35 item 11): how every host's caches follow the
// shared tables they keep in memory. One table, `changes`, holds one row per record of a followed
// table: its kind, its key, the version of its last change and its payload (the columns the
// caches need, as jsonb) — or no payload once the record is gone (a tombstone). One trigger
// function, `rootbox_change()`, attached to every followed table with the kind, the key column
// and the payload's columns as arguments, writes that row after each insert, update and delete
// that changed the payload (an update that changed nothing a cache keeps writes no version), and
// NOTIFYs `rootbox_changes` with "<kind>:<version>": a nudge to catch up, not the record (NOTIFY
// has no replay; the catch-up is the truth). `KINDS` below is the one list of what is followed:
// the trigger's arguments, the copy of the rows schema 17 starts from and the zod schemas a
// payload is checked with when read all come from it.
//
// Versions come from one sequence, each taken under `FEED_LOCK` held until commit, so they commit
// in order: a catch-up `version > seen` never skips a smaller version that commits after it.
// Tombstones are pruned once every live host caught up past them (or past a retention), raising
// `tombstone_floor`; a cache behind the floor reloads everything (placements.ts). Placement
// tombstones are kept: the wake fence reads them (names.ts `fenceOf`); a full load reads none of
// them all the same (schema 18's index of the live records). Slug claims are not in the
// feed: no cache reads them (a placement carries its slug).

import { z } from 'zod';
import type { RegistryPool } from './pool.js';

/** The channel every change is notified on. */
export const FEED_CHANNEL = 'rootbox_changes';

/** Key of the transaction-scoped advisory lock every change takes before its version, held until
 *  its transaction commits: versions commit in the order they were taken. 'plac' in ASCII (the
 *  number schema 7 chose); migrations lock 'root' (migrations.ts), the other locks take two keys. */
export const FEED_LOCK = 0x706c6163;

const text = z.string();

/** Every followed table: its kind in the feed, the column that keys it, and its payload (the
 *  columns a cache keeps, named as in the table; a timestamp is read as its ISO text). */
export const KINDS = {
  /** Where a server runs (names.ts): the placement cache. */
  placement: {
    table: 'placements',
    key: 'server_id',
    payload: z.object({ host: text, epoch: z.number().int(), account_id: text, slug: text, public_ip: text }),
  },
  /** A custom domain's server and state (shared.ts): the domain map. */
  domain: { table: 'custom_domains', key: 'domain', payload: z.object({ server_id: text, state: text }) },
  /** A server's SSH public key (shared.ts): the key map. */
  key: { table: 'server_keys', key: 'server_id', payload: z.object({ fingerprint: text, host: text, public_key: text }) },
  /** An HTTP-01 answer of an order under way (shared.ts): the challenge map. */
  challenge: { table: 'acme_challenges', key: 'token', payload: z.object({ key_authorization: text, expires_at: text }) },
  /** An account's api-key hash (accounts.ts): the account key map. */
  account: { table: 'accounts', key: 'id', payload: z.object({ key_hash: text }) },
} as const;

export type Kind = keyof typeof KINDS;
type Payload<K extends Kind> = z.infer<(typeof KINDS)[K]['payload']>;

/** One change as a cache reads it: the record's payload now, or undefined when it is gone. */
export type Change = { [K in Kind]: { kind: K; key: string; version: number; row: Payload<K> | undefined } }[Kind];

const kinds = Object.entries(KINDS) as [Kind, (typeof KINDS)[Kind]][];
const columns = (k: Kind) => Object.keys(KINDS[k].payload.shape);

/** The trigger function, attached to each followed table. TG_ARGV: the kind, the key column, then
 *  the payload's columns. An AFTER trigger: it sees only rows that were written (an insert that
 *  lost its ON CONFLICT, or an update whose WHERE failed, writes no change). */
const TRIGGER_FN = `
  CREATE FUNCTION rootbox_change() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    feed_kind text := TG_ARGV[0];
    old_row jsonb := CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END;
    new_row jsonb := CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END;
    old_payload jsonb := '{}';
    new_payload jsonb := '{}';
    v bigint;
  BEGIN
    FOR i IN 2 .. TG_NARGS - 1 LOOP
      old_payload := old_payload || jsonb_build_object(TG_ARGV[i], old_row -> TG_ARGV[i]);
      new_payload := new_payload || jsonb_build_object(TG_ARGV[i], new_row -> TG_ARGV[i]);
    END LOOP;
    IF TG_OP = 'UPDATE' AND old_row ->> TG_ARGV[1] = new_row ->> TG_ARGV[1] AND old_payload = new_payload THEN
      RETURN NULL; -- nothing a cache keeps changed
    END IF;
    PERFORM pg_advisory_xact_lock(${FEED_LOCK});
    IF old_row IS NOT NULL AND (new_row IS NULL OR old_row ->> TG_ARGV[1] <> new_row ->> TG_ARGV[1]) THEN
      v := nextval('change_version_seq');
      INSERT INTO changes AS c (kind, key, version, payload) VALUES (feed_kind, old_row ->> TG_ARGV[1], v, NULL)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, payload = NULL, changed_at = now();
      PERFORM pg_notify('${FEED_CHANNEL}', feed_kind || ':' || v);
    END IF;
    IF new_row IS NOT NULL THEN
      v := nextval('change_version_seq');
      INSERT INTO changes AS c (kind, key, version, payload) VALUES (feed_kind, new_row ->> TG_ARGV[1], v, new_payload)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload, changed_at = now();
      PERFORM pg_notify('${FEED_CHANNEL}', feed_kind || ':' || v);
    END IF;
    RETURN NULL;
  END $$;`;

/** What schemas 7, 11, 12 and 16 numbered, and how (feed-history.ts): each kind's table and the
 *  tombstone letter it had. */
const OLD_LETTER: Record<Kind, string> = { placement: 'p', domain: 'd', key: 'k', challenge: 'c', account: 'a' };
const OLD_TRIGGERS = [
  'placements_version ON placements',
  'slugs_version ON slugs',
  'custom_domains_version ON custom_domains',
  'server_keys_version ON server_keys',
  'acme_challenges_version ON acme_challenges',
  'accounts_version ON accounts',
];

/** Schema 17: the old per-table versions and `placement_tombstones` become rows of `changes`, at
 *  the versions they had (the sequence goes on: the hosts' caught-up versions and the tombstone
 *  floor keep their meaning); the old triggers, functions, columns and table are dropped. The
 *  feed's lock first: a change an old trigger numbered is committed and copied, or waits and then
 *  fails (its function gone), never lost between the copy and the drop. */
export const FEED_SQL = `
  SELECT pg_advisory_xact_lock(${FEED_LOCK});
  ALTER SEQUENCE placement_version_seq RENAME TO change_version_seq;
  CREATE TABLE changes (
    kind        text NOT NULL,
    key         text NOT NULL,
    version     bigint NOT NULL,
    payload     jsonb,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, key)
  );
  INSERT INTO changes (kind, key, version, payload)
  ${kinds
    .map(
      ([k, d]) =>
        `SELECT '${k}', ${d.key}, version, jsonb_build_object(${columns(k)
          .map((c) => `'${c}', ${c}`)
          .join(', ')}) FROM ${d.table}`,
    )
    .join('\n  UNION ALL ')};
  INSERT INTO changes (kind, key, version, payload, changed_at)
    SELECT CASE kind ${kinds.map(([k]) => `WHEN '${OLD_LETTER[k]}' THEN '${k}'`).join(' ')} END, key, version, NULL, gone_at
      FROM placement_tombstones WHERE kind IN (${kinds.map(([k]) => `'${OLD_LETTER[k]}'`).join(', ')})
    ON CONFLICT (kind, key) DO NOTHING;
  ${OLD_TRIGGERS.map((t) => `DROP TRIGGER ${t};`).join('\n  ')}
  DROP FUNCTION rootbox_placement_version(), rootbox_domain_version(), rootbox_shared_version();
  DROP TABLE placement_tombstones;
  ${['slugs', ...kinds.map(([, d]) => d.table)].map((t) => `ALTER TABLE ${t} DROP COLUMN version;`).join('\n  ')}
  CREATE INDEX changes_version ON changes (version);
  ${TRIGGER_FN}
  ${kinds
    .map(
      ([k, d]) => `CREATE TRIGGER ${d.table}_change AFTER INSERT OR UPDATE OR DELETE ON ${d.table}
    FOR EACH ROW EXECUTE FUNCTION rootbox_change(${[k, d.key, ...columns(k)].map((a) => `'${a}'`).join(', ')});`,
    )
    .join('\n  ')}`;

/** Schema 16: what lets tombstones be pruned. Each host records in its `hosts` row the version
 *  its caches caught up to (`caught_up`); `tombstone_floor` holds the highest version of a
 *  tombstone pruned so far: a cache that caught up to less may have missed a delete, so it
 *  reloads everything instead of catching up (placements.ts). */
export const TOMBSTONES_SQL = `
  ALTER TABLE hosts ADD COLUMN caught_up bigint NOT NULL DEFAULT 0;
  CREATE TABLE tombstone_floor (
    id       int PRIMARY KEY CHECK (id = 1),
    version  bigint NOT NULL
  );
  INSERT INTO tombstone_floor (id, version) VALUES (1, 0);`;

/**
 * Prunes the tombstones every live host has caught up past, and any older than the retention
 * ($1, seconds) whoever has not, raising the floor to the highest version pruned — in one
 * statement (one snapshot: a catch-up sees both or neither). Idempotent, so every host may run
 * it. Placement tombstones are kept: the wake fence and a start's reconcile read them to never
 * start again a server deleted while its old host was away (a host's start reads none of them: a
 * full load reads no tombstone). Answers how many were pruned.
 */
export const PRUNE_TOMBSTONES = `
  WITH gone AS (
    DELETE FROM changes
     WHERE payload IS NULL AND kind <> 'placement'
       AND (version <= (SELECT coalesce(min(caught_up), 0) FROM hosts WHERE lease_until > now())
            OR changed_at < now() - make_interval(secs => $1))
    RETURNING version
  ), floor AS (
    UPDATE tombstone_floor SET version = greatest(version, (SELECT max(version) FROM gone))
     WHERE id = 1 AND EXISTS (SELECT 1 FROM gone)
    RETURNING version
  )
  SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM floor) AS raised`;

/** Schema 18: an index of the live records alone, so a full load reads none of the tombstones
 *  (placement tombstones are never pruned: with the plain version index it read them all). */
export const LIVE_INDEX_SQL = `
  CREATE INDEX changes_live ON changes (version) WHERE payload IS NOT NULL;`;

/** Changes above $1, tombstones above $2 (a full load: 0 and above every version), and one last
 *  row without a kind: the floor, and the highest version of the snapshot. Live records and
 *  tombstones are read apart: the first through `changes_live` (schema 18), the second through
 *  the version index from above $2 (a full load: none read). Exported for its test. */
export const CATCH_UP = `
  SELECT kind, key, payload, version, NULL::bigint AS floor FROM changes
   WHERE payload IS NOT NULL AND version > $1
  UNION ALL
  SELECT kind, key, payload, version, NULL FROM changes
   WHERE payload IS NULL AND version > $1 AND version > $2
  UNION ALL
  SELECT NULL, NULL, NULL, greatest(f.version, (SELECT coalesce(max(version), 0) FROM changes)), f.version FROM tombstone_floor f
  ORDER BY version`;
export const NO_TOMBSTONES = '9223372036854775807';

export interface FeedRead {
  /** The changes, oldest first, each payload checked against its kind's schema. */
  changes: Change[];
  /** The highest version of a pruned tombstone: a cache that saw less may have missed a delete. */
  floor: number;
  /** Every version up to this one is in the snapshot (versions commit in order). */
  top: number;
  /** Rows of a kind this rootbox does not know, or whose payload does not fit it (skipped). */
  skipped: number;
}

/** Reads what changed since `seen` (`full`: every live record, no tombstone). */
export async function readFeed(pool: RegistryPool, seen: number, full: boolean): Promise<FeedRead> {
  const r = await pool.query<{ kind: string | null; key: string; payload: unknown; version: string; floor: string | null }>(
    CATCH_UP,
    full ? [0, NO_TOMBSTONES] : [seen, seen],
  );
  const out: FeedRead = { changes: [], floor: 0, top: 0, skipped: 0 };
  for (const x of r.rows) {
    const version = Number(x.version);
    if (x.kind === null) {
      out.floor = Number(x.floor);
      out.top = Math.max(out.top, version);
      continue;
    }
    const change = parse(x.kind, x.key, x.payload, version);
    if (change) out.changes.push(change);
    else out.skipped++;
    out.top = Math.max(out.top, version);
  }
  return out;
}

function parse(kind: string, key: string, payload: unknown, version: number): Change | undefined {
  if (!Object.hasOwn(KINDS, kind)) return undefined;
  if (payload === null) return { kind: kind as Kind, key, version, row: undefined };
  const p = KINDS[kind as Kind].payload.safeParse(payload);
  return p.success ? ({ kind, key, version, row: p.data } as Change) : undefined;
}

/** A notification's kind and version ("<kind>:<version>"); undefined for anything else. */
export function notified(payload: string | undefined): { kind: Kind; version: number } | undefined {
  const i = payload?.lastIndexOf(':') ?? -1;
  if (i < 0) return undefined;
  const kind = payload!.slice(0, i);
  const version = Number(payload!.slice(i + 1));
  return Object.hasOwn(KINDS, kind) && Number.isSafeInteger(version) ? { kind: kind as Kind, version } : undefined;
}
