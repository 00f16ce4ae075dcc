// The change feed as schemas 7, 11, 12 and 16 made it, kept verbatim because a registry created
// now applies every migration in order: a version number per followed table, tombstones in
// `placement_tombstones`, and three trigger functions (placements and slugs; custom domains;
// server keys, HTTP-01 answers and accounts) notifying `rootbox_placements`. Schema 17 (feed.ts)
// moves what they wrote into the one `changes` table and drops all of it: no code reads these.

import { FEED_LOCK } from './feed.js';

const OLD_CHANNEL = 'rootbox_placements';

/** Schema 7: placements and slugs numbered from one sequence, deletes kept as tombstones. */
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
    PERFORM pg_advisory_xact_lock(${FEED_LOCK});
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version)
        VALUES (k, CASE WHEN k = 'p' THEN OLD.server_id ELSE OLD.slug END, v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${OLD_CHANNEL}', k || ':' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = k AND key = CASE WHEN k = 'p' THEN NEW.server_id ELSE NEW.slug END;
    END IF;
    PERFORM pg_notify('${OLD_CHANNEL}', k || ':' || v);
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

/** Schema 11: custom domains numbered from the same sequence (tombstone kind 'd'). */
export const DOMAINS_SQL = `
  ALTER TABLE custom_domains ADD COLUMN version bigint NOT NULL DEFAULT 0;
  CREATE FUNCTION rootbox_domain_version() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    v bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(${FEED_LOCK});
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version) VALUES ('d', OLD.domain, v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${OLD_CHANNEL}', 'd:' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = 'd' AND key = NEW.domain;
    END IF;
    PERFORM pg_notify('${OLD_CHANNEL}', 'd:' || v);
    RETURN NEW;
  END $$;
  CREATE TRIGGER custom_domains_version BEFORE INSERT OR UPDATE OR DELETE ON custom_domains
    FOR EACH ROW EXECUTE FUNCTION rootbox_domain_version();
  UPDATE custom_domains SET state = state; -- numbers the rows claimed before (the trigger)
  CREATE INDEX custom_domains_version ON custom_domains (version);`;

/** Schema 12: servers' SSH keys ('k') and HTTP-01 answers ('c') numbered the same way. */
export const SHARED_MAPS_SQL = `
  ALTER TABLE server_keys ADD COLUMN version bigint NOT NULL DEFAULT 0;
  ALTER TABLE acme_challenges ADD COLUMN version bigint NOT NULL DEFAULT 0;
  -- arguments: the tombstone kind, the key column
  CREATE FUNCTION rootbox_shared_version() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    k text := TG_ARGV[0];
    v bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(${FEED_LOCK});
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version) VALUES (k, to_jsonb(OLD) ->> TG_ARGV[1], v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${OLD_CHANNEL}', k || ':' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = k AND key = to_jsonb(NEW) ->> TG_ARGV[1];
    END IF;
    PERFORM pg_notify('${OLD_CHANNEL}', k || ':' || v);
    RETURN NEW;
  END $$;
  CREATE TRIGGER server_keys_version BEFORE INSERT OR UPDATE OR DELETE ON server_keys
    FOR EACH ROW EXECUTE FUNCTION rootbox_shared_version('k', 'server_id');
  CREATE TRIGGER acme_challenges_version BEFORE INSERT OR UPDATE OR DELETE ON acme_challenges
    FOR EACH ROW EXECUTE FUNCTION rootbox_shared_version('c', 'token');
  UPDATE server_keys SET host = host; -- numbers the rows written before (the trigger)
  UPDATE acme_challenges SET token = token;
  CREATE INDEX server_keys_version ON server_keys (version);
  CREATE INDEX acme_challenges_version ON acme_challenges (version);`;

/** Schema 16 (its feed part): accounts numbered the same way ('a', keyed by account id). */
export const ACCOUNT_KEYS_SQL = `
  ALTER TABLE accounts ADD COLUMN version bigint NOT NULL DEFAULT 0;
  CREATE TRIGGER accounts_version BEFORE INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION rootbox_shared_version('a', 'id');
  UPDATE accounts SET host = host; -- numbers the rows written before (the trigger)
  CREATE INDEX accounts_version ON accounts (version);`;
