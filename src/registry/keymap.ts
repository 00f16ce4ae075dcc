// Every host's view of the cluster's servers' SSH public keys (schema 12, issue 29 leftovers): a
// login with a key no server of this host has is answered from memory — the server of another
// host it belongs to, or unknown — instead of a registry read per attempt that any stranger with
// a fresh key could cause. `server_keys` rows are numbered from the placements' sequence (same
// advisory lock: versions commit in order), a removal leaves a tombstone of kind 'k', and each
// change NOTIFYs `rootbox_placements` with "k:<version>": the placement cache's one catch-up
// fills this map (loaded whole at start, followed by LISTEN/NOTIFY, the cache's timer as the
// safety net), as it does the custom domains (domainmap.ts). A key re-recorded unchanged (a
// host's start) writes no new version.

import { PLACEMENT_CHANNEL } from './placements-sql.js';

export const KEYS_SQL = `
  ALTER TABLE server_keys ADD COLUMN version bigint NOT NULL DEFAULT 0;
  CREATE FUNCTION rootbox_key_version() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    v bigint;
  BEGIN
    PERFORM pg_advisory_xact_lock(1886151011);
    v := nextval('placement_version_seq');
    IF TG_OP = 'DELETE' THEN
      INSERT INTO placement_tombstones (kind, key, version) VALUES ('k', OLD.server_id, v)
        ON CONFLICT (kind, key) DO UPDATE SET version = EXCLUDED.version, gone_at = now();
      PERFORM pg_notify('${PLACEMENT_CHANNEL}', 'k:' || v);
      RETURN OLD;
    END IF;
    NEW.version := v;
    IF TG_OP = 'INSERT' THEN
      DELETE FROM placement_tombstones WHERE kind = 'k' AND key = NEW.server_id;
    END IF;
    PERFORM pg_notify('${PLACEMENT_CHANNEL}', 'k:' || v);
    RETURN NEW;
  END $$;
  CREATE TRIGGER server_keys_version BEFORE INSERT OR UPDATE OR DELETE ON server_keys
    FOR EACH ROW EXECUTE FUNCTION rootbox_key_version();
  UPDATE server_keys SET host = host; -- numbers the keys recorded before (the trigger)
  CREATE INDEX server_keys_version ON server_keys (version);`;

/** The catch-up's part for keys: rows ('k': server_id, fingerprint, host, public key) and tombstones ('y': server_id). */
export const KEYS_CATCH_UP = `
  SELECT 'k' AS kind, server_id, fingerprint AS slug, host, NULL, NULL, public_key AS public_ip, version FROM server_keys WHERE version > $1
  UNION ALL
  SELECT 'y', key, NULL, NULL, NULL, NULL, NULL, version FROM placement_tombstones WHERE kind = 'k' AND version > $1`;

export interface KnownKey {
  serverId: string;
  fingerprint: string;
  /** The OpenSSH public key line. */
  publicKey: string;
  /** The host that recorded it (the server's). */
  host: string;
  version: number;
}

export class KeyMap {
  private readonly servers = new Map<string, KnownKey>();
  private readonly fingerprints = new Map<string, KnownKey[]>();

  /** The servers whose key has this fingerprint (SHA256, base64 without padding), any host's. */
  byFingerprint(fingerprint: string): readonly KnownKey[] {
    return this.fingerprints.get(fingerprint) ?? [];
  }

  get size(): number {
    return this.servers.size;
  }

  /** One catch-up row: a server's key, or its tombstone (`key` undefined). */
  apply(serverId: string, key: Omit<KnownKey, 'serverId' | 'version'> | undefined, version: number): void {
    const had = this.servers.get(serverId);
    if (had && had.version > version) return;
    if (had) {
      const rest = this.byFingerprint(had.fingerprint).filter((k) => k.serverId !== serverId);
      if (rest.length) this.fingerprints.set(had.fingerprint, rest);
      else this.fingerprints.delete(had.fingerprint);
      this.servers.delete(serverId);
    }
    if (!key) return;
    const k: KnownKey = { serverId, ...key, version };
    this.servers.set(serverId, k);
    this.fingerprints.set(
      k.fingerprint,
      [...this.byFingerprint(k.fingerprint), k].sort((x, y) => (x.serverId < y.serverId ? -1 : 1)),
    );
  }
}
