// Schema 7: placement changes carry a version, so every host's placement cache can follow them.
// One sequence numbers every change of `placements` and `slugs` (insert, update, delete); a
// delete leaves a tombstone with its version (a re-insert of the key removes it), so a cache
// catching up with `WHERE version > $seen` also sees what was deleted. The version is taken
// under a transaction-scoped advisory lock held until commit, so versions commit in order and a
// catch-up never skips a smaller version that commits later. Each change NOTIFYs
// `rootbox_placements` with a small payload "<kind>:<version>" (kind p = placement, s = slug):
// a nudge to catch up, not the record itself (NOTIFY has no replay; the catch-up is the truth).

export const PLACEMENT_CHANNEL = 'rootbox_placements';

export const PLACEMENTS_SQL = `
  CREATE SEQUENCE placement_version_seq;
  ALTER TABLE placements ADD COLUMN version bigint NOT NULL DEFAULT 0;
  ALTER TABLE slugs ADD COLUMN version bigint NOT NULL DEFAULT 0;
  CREATE TABLE placement_tombstones (
    kind     text NOT NULL,
    key      text NOT NULL,
    version  bigint NOT NULL,
    gone_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, key)
  );
  CREATE FUNCTION rootbox_placement_version() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    k text := CASE WHEN TG_TABLE_NAME = 'placements' THEN 'p' ELSE 's' END;
    v bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(1886151011);
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version)
        VALUES (k, CASE WHEN k = 'p' THEN OLD.server_id ELSE OLD.slug END, v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${PLACEMENT_CHANNEL}', k || ':' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = k AND key = CASE WHEN k = 'p' THEN NEW.server_id ELSE NEW.slug END;
    END IF;
    PERFORM pg_notify('${PLACEMENT_CHANNEL}', k || ':' || v);
    RETURN NEW;
  END $$;
  CREATE TRIGGER placements_version BEFORE INSERT OR UPDATE OR DELETE ON placements
    FOR EACH ROW EXECUTE FUNCTION rootbox_placement_version();
  CREATE TRIGGER slugs_version BEFORE INSERT OR UPDATE OR DELETE ON slugs
    FOR EACH ROW EXECUTE FUNCTION rootbox_placement_version();
  UPDATE placements SET version = nextval('placement_version_seq');
  UPDATE slugs SET version = nextval('placement_version_seq');
  CREATE INDEX placements_version ON placements (version);
  CREATE INDEX slugs_version ON slugs (version);
  CREATE INDEX placement_tombstones_version ON placement_tombstones (version);`;

/** Schema 16: what lets tombstones be pruned. Each host records in its `hosts` row the version
 *  its placement cache has caught up to (`caught_up`); `tombstone_floor` holds the highest version
 *  of a tombstone pruned so far: a cache that caught up to less may have missed a delete, so it
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
 * it. Placement tombstones ('p') are kept: the wake fence and a start's reconcile read them to
 * never start again a server deleted while its old host was away (a host's start reads none of
 * them: a full load reads no tombstone). Answers how many were pruned.
 */
export const PRUNE_TOMBSTONES = `
  WITH gone AS (
    DELETE FROM placement_tombstones
     WHERE kind <> 'p'
       AND (version <= (SELECT coalesce(min(caught_up), 0) FROM hosts WHERE lease_until > now())
            OR gone_at < now() - make_interval(secs => $1))
    RETURNING version
  ), floor AS (
    UPDATE tombstone_floor SET version = greatest(version, (SELECT max(version) FROM gone))
     WHERE id = 1 AND EXISTS (SELECT 1 FROM gone)
    RETURNING version
  )
  SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM floor) AS raised`;
