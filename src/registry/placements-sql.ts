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
