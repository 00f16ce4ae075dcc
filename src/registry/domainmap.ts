// Every host's view of the cluster's custom domains (schema 11, issue 29 item 2): which server an
// active domain routes to, whichever host runs it, so any host's edge can take a request for it
// and forward it to the owner. `custom_domains` rows are numbered from the placements' sequence
// (same advisory lock: versions commit in order), a detach leaves a tombstone of kind 'd', and
// each change NOTIFYs `rootbox_placements` with "d:<version>": the placement cache's one catch-up
// (`version > seen`, one statement, so placements and domains are read from one snapshot) fills
// this map, loaded whole at start and followed by LISTEN/NOTIFY, with the cache's timer as the
// safety net. The map is complete, so a Host it does not hold costs no registry read.

import { PLACEMENT_CHANNEL } from './placements-sql.js';

export const DOMAINS_SQL = `
  ALTER TABLE custom_domains ADD COLUMN version bigint NOT NULL DEFAULT 0;
  CREATE FUNCTION rootbox_domain_version() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    v bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(1886151011);
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version) VALUES ('d', OLD.domain, v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${PLACEMENT_CHANNEL}', 'd:' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = 'd' AND key = NEW.domain;
    END IF;
    PERFORM pg_notify('${PLACEMENT_CHANNEL}', 'd:' || v);
    RETURN NEW;
  END $$;
  CREATE TRIGGER custom_domains_version BEFORE INSERT OR UPDATE OR DELETE ON custom_domains
    FOR EACH ROW EXECUTE FUNCTION rootbox_domain_version();
  UPDATE custom_domains SET state = state; -- numbers the rows claimed before (the trigger)
  CREATE INDEX custom_domains_version ON custom_domains (version);`;

/** The catch-up's part for domains: rows ('d': server_id, domain, state) above $1 and tombstones
 *  ('x': domain) above $2 (a full load asks for none). */
export const DOMAINS_CATCH_UP = `
  SELECT 'd' AS kind, server_id, domain AS slug, state AS host, NULL, account_id, NULL, version FROM custom_domains WHERE version > $1
  UNION ALL
  SELECT 'x', key, NULL, NULL, NULL, NULL, NULL, version FROM placement_tombstones WHERE kind = 'd' AND version > $2`;

export interface DomainRoute {
  serverId: string;
  state: string;
  version: number;
}

export class DomainMap {
  private readonly rows = new Map<string, DomainRoute>();
  private readonly watchers: (() => void)[] = [];
  private changed = false;

  /** A domain's row (any state), undefined when no server holds it. */
  get(domain: string): DomainRoute | undefined {
    return this.rows.get(domain);
  }

  /** The server an active domain routes to. */
  activeServer(domain: string): string | undefined {
    const r = this.rows.get(domain);
    return r?.state === 'active' ? r.serverId : undefined;
  }

  get size(): number {
    return this.rows.size;
  }

  /** One catch-up row: a domain's state, or its tombstone (`serverId` undefined). */
  apply(domain: string, serverId: string | undefined, state: string, version: number): void {
    const had = this.rows.get(domain);
    if (had && had.version > version) return;
    if (serverId === undefined) this.rows.delete(domain);
    else this.rows.set(domain, { serverId, state, version });
    this.changed = true;
  }

  /** Forgets every domain (a full load follows). */
  clear(): void {
    if (this.rows.size) this.changed = true;
    this.rows.clear();
  }

  /** Called after each catch-up that changed a domain (certificates to install or drop). */
  watch(fn: () => void): void {
    this.watchers.push(fn);
  }

  /** After a catch-up: tells the watchers once when something changed. */
  settle(): void {
    if (!this.changed) return;
    this.changed = false;
    for (const fn of this.watchers) fn();
  }
}
