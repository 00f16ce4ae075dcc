// The tables of the records every host serves or checks (schema 6, used by shared.ts):
// certificates (their keys sealed, a version per write from one sequence, removed rows kept so
// hosts uninstall them), the HTTP-01 answers of the orders under way, custom domains (one holder
// across hosts) and servers' SSH public keys by fingerprint.

/** Schema 6: certificates, HTTP-01 answers, custom domains, servers' SSH keys. */
export const SHARED_SQL = `
  CREATE SEQUENCE certificates_version;
  CREATE TABLE certificates (
    id          text PRIMARY KEY,
    names       jsonb NOT NULL,
    cert_pem    text NOT NULL,
    key_enc     bytea NOT NULL,
    not_after   bigint NOT NULL,
    issued_at   bigint NOT NULL,
    host        text NOT NULL,
    version     bigint NOT NULL DEFAULT nextval('certificates_version'),
    removed     boolean NOT NULL DEFAULT false
  );
  CREATE INDEX certificates_version_idx ON certificates (version);
  CREATE TABLE acme_challenges (
    token              text PRIMARY KEY,
    key_authorization  text NOT NULL,
    expires_at         timestamptz NOT NULL
  );
  CREATE TABLE custom_domains (
    domain      text PRIMARY KEY,
    server_id   text NOT NULL,
    account_id  text NOT NULL,
    host        text NOT NULL,
    state       text NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
  );
  CREATE INDEX custom_domains_server ON custom_domains (server_id);
  CREATE TABLE server_keys (
    server_id    text PRIMARY KEY,
    fingerprint  text NOT NULL,
    public_key   text NOT NULL,
    host         text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
  );
  CREATE INDEX server_keys_fingerprint ON server_keys (fingerprint);`;
