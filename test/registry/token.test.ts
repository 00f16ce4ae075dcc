// The cluster token (issue 35 item 2) against a real PostgreSQL and real daemons: `cluster init`
// makes a token, prints it once and writes it to a 0600 file; a `pg_dump` of the registry holds
// none of its secrets (the CA's key, a certificate's key, the cluster secrets) in PEM, base64 or
// hex, nor the token; secrets a registry from before schema 14 kept in clear are sealed by the
// next host given the token (and by init); a host with a wrong token or none refuses to start
// and the registry is byte for byte what it was; so is an init given a wrong token.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { clusterCommand } from '../../src/admin/cli-cluster.js';
import { loadConfig } from '../../src/config/index.js';
import { isAppError } from '../../src/errors.js';
import { ClusterKeys, clusterSecret, RegistryCa, RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { freePort } from '../helpers/ports.js';
import { run } from '../helpers/run.js';

let pg: TestPostgres;
let pool: RegistryPool;
let dir: string;
let token = '';
const daemons: TestDaemon[] = [];

/** `rootbox cluster init`, in this process, with `cluster` over the registry URL. */
async function init(cluster: Record<string, unknown> = {}): Promise<{ code: number; out: string }> {
  const out: string[] = [];
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { dataDir: join(dir, 'cli'), cluster: { registry: pg.url, ...cluster } } });
  const code = await clusterCommand(cfg, 'init', {}, { out: (s) => out.push(s), err: (s) => out.push(s) });
  return { code, out: out.join('\n') };
}

/** A host's cluster settings: its name, the token given, a channel port of its own. */
const clusterOf = async (host: string, o: Record<string, unknown>) => {
  const listen = `127.0.0.1:${await freePort()}`;
  return { cluster: { registry: pg.url, host, listen, advertise: listen, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s', ...o } };
};

/** pg_dump of the registry (schema and data, as a backup would take it). */
async function dump(dataOnly = false): Promise<string> {
  const r = await run(
    '/usr/lib/postgresql/15/bin/pg_dump',
    ['-h', '127.0.0.1', '-p', String(pg.port), '-U', 'rootbox', '-d', 'postgres', ...(dataOnly ? ['--data-only'] : [])],
    {
      env: { ...process.env, PGPASSWORD: pg.password },
    },
  );
  assert.is(r.code, 0, r.stderr);
  return r.stdout.replace(/^\\(un)?restrict .*$/gm, ''); // a random key of pg_dump's each run
}

/** Every form a secret may take in a dump: a PEM's base64 lines, the DER in base64 and hex; raw bytes in hex and base64. */
function forms(secret: string | Buffer): string[] {
  if (typeof secret === 'string') {
    const der = createPrivateKey(secret).export({ type: 'pkcs8', format: 'der' });
    const lines = secret.split('\n').filter((l) => l && !l.startsWith('-----'));
    return [...lines, der.toString('base64'), der.toString('hex')];
  }
  return [secret.toString('hex'), secret.toString('base64'), secret.toString('base64url')];
}

function assertNone(text: string, secrets: Record<string, string | Buffer>): void {
  for (const [what, s] of Object.entries(secrets)) for (const f of forms(s)) assert.not.ok(text.includes(f), `the dump holds ${what} (${f.slice(0, 24)}…)`);
}

const code = (p: Promise<unknown>) =>
  p.then(
    () => 'started',
    (e: unknown) => (isAppError(e) ? e.code : String(e)),
  );

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  dir = mkdtempSync(join(tmpdir(), 'rbx-token-'));
});
test.after(async () => {
  for (const d of daemons) await d.stop().catch(() => {});
  await pool?.end();
  await pg?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('init makes the cluster token, prints it once and writes it to a 0600 file; init again needs it', async () => {
  const first = await init();
  assert.is(first.code, 0, first.out);
  const file = join(dir, 'cli', 'cluster-token');
  token = readFileSync(file, 'utf8').trim();
  assert.match(token, /^rbx1_[A-Za-z0-9_-]{43}$/);
  assert.is(statSync(file).mode & 0o777, 0o600);
  assert.is(first.out.split(token).length - 1, 1, 'printed once');
  // the file is the token init was given from now on: init again is current and prints nothing of it
  const again = await init();
  assert.is(again.code, 0, again.out);
  assert.not.ok(again.out.includes(token));
  rmSync(file);
  const without = await init();
  assert.is(without.code, 1);
  assert.match(without.out, /has a cluster token already/);
  assert.is((await init({ token })).code, 0);
});

test("a pg_dump of the registry holds neither the CA's key, a certificate's key, the cluster secrets nor the token", async () => {
  const keys = new ClusterKeys(token);
  const d = await startTestDaemon(await clusterOf('host-a', { token }));
  daemons.push(d);
  const certKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  await new RegistryShared(pool, 'host-a', keys).saveCertificate({ id: 'host', names: ['x.test'], certPem: 'CERT', keyPem: certKey, notAfter: 1, issuedAt: 1 });
  const secrets = {
    'the CA key': (await new RegistryCa(pool, keys).load())!.keyPem,
    "a certificate's key": certKey,
    'the api-key secret': (await clusterSecret(pool, keys, false, 'api_keys'))!,
    'the certificate-key secret': (await clusterSecret(pool, keys, false, 'certificate-keys'))!,
  };
  assert.ok(secrets['the certificate-key secret'], 'the host made the certificate-key secret');
  const text = await dump();
  assert.ok(text.includes('cluster_ca') && text.includes('BEGIN CERTIFICATE'), 'the dump has the registry');
  assertNone(text, secrets);
  assert.not.ok(text.includes(token), 'the dump holds the token');
  assert.not.ok(JSON.stringify(d.logs).includes(token), 'the log holds the token');
});

test('secrets a registry kept in clear before schema 14 are sealed by the next host given the token, and by init', async () => {
  const keys = new ClusterKeys(token);
  const caKey = (await new RegistryCa(pool, keys).load())!.keyPem;
  const apiSecret = (await clusterSecret(pool, keys, false, 'api_keys'))!;
  const inClear = async () => {
    await pg.sql(`UPDATE cluster_ca SET key_pem = '${caKey}', key_sealed = false`);
    await pg.sql(`UPDATE cluster_secrets SET value = '\\x${apiSecret.toString('hex')}', sealed = false WHERE name = 'api_keys'`);
    assert.ok((await dump()).includes(caKey.split('\n')[1]), 'in clear, as before schema 14');
  };
  await inClear();
  const d = await startTestDaemon(await clusterOf('host-b', { token }));
  daemons.push(d);
  assertNone(await dump(), { 'the CA key': caKey, 'the api-key secret': apiSecret });
  assert.is((await new RegistryCa(pool, keys).load())!.keyPem, caKey, 'the same CA, sealed');
  assert.equal(await clusterSecret(pool, keys, false, 'api_keys'), apiSecret, 'the same secret, sealed');
  await inClear();
  const r = await init({ token });
  assert.is(r.code, 0, r.out);
  assert.match(r.out, /2 secrets sealed under the cluster token/);
  assertNone(await dump(), { 'the CA key': caKey, 'the api-key secret': apiSecret });
});

test('a host with a wrong token, or none, refuses to start and the registry is as it was; so is an init with a wrong token', async () => {
  for (const d of daemons.splice(0)) await d.stop();
  const before = await dump(true);
  assert.is(await code(startTestDaemon(await clusterOf('host-w', { token: `${token.slice(0, -1)}x` }))), 'cluster_token_wrong');
  assert.is(await code(startTestDaemon(await clusterOf('host-w', { token: undefined }))), 'cluster_token_missing');
  assert.is(await code(startTestDaemon(await clusterOf('host-w', { tokenFile: join(dir, 'nothing-here') }))), 'cluster_token_missing');
  const wrong = await init({ token: 'rbx1_not-the-token-of-this-cluster' });
  assert.is(wrong.code, 1);
  assert.match(wrong.out, /not the one `rootbox cluster init` made/);
  assert.is(await dump(true), before, 'the registry is unchanged');
  assert.is(await pg.sql("SELECT count(*) FROM hosts WHERE name = 'host-w'"), '0');
});

test.run();
