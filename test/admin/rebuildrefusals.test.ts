// What a state backup carries and what `rootbox restore --from-backup` refuses (issue 37 item 5),
// with the real CLI code, LMDB and files, no daemon and no runc: the backup carries the host's key,
// SSH host keys and certificate files and the settlement journal, and a plain restore puts them
// back (never over a file that exists), the live store keeping none of them; a rebuild refuses a
// data dir that holds anything (a new disk's lost+found aside), a backup without a host key, and
// a checkpoint store it cannot reach — each with a clear message, the data dir left as it was (one
// that did not exist is not made) and no staging dir left in or beside it.
// (A store whose checkpoints do not open with the key, and the whole rebuild: rebuild.test.ts.)

import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loadConfig } from '../../src/config/index.js';
import { AppError } from '../../src/errors.js';
import { createLogger } from '../../src/log/index.js';
import { startDaemon, type RuntimeMaker } from '../../src/main.js';
import { lockDataDir, type Runtime } from '../../src/runtime/index.js';
import { openStore, summarizeStore } from '../../src/store/index.js';
import { adminCli } from '../helpers/admincli.js';
import { freePort } from '../helpers/ports.js';

const dirs: string[] = [];
const scratch = (tag: string) => {
  const d = mkdtempSync(join(tmpdir(), `rbx-rebuildref-${tag}-`));
  dirs.push(d);
  return d;
};
test.after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const hostKey = randomBytes(32);
const sshKey = '-----BEGIN OPENSSH PRIVATE KEY-----\nnot checked here\n-----END OPENSSH PRIVATE KEY-----\n';
const journal = '{"key":["a","b","c"],"change":{"state":"pending"}}\n';
let source = '';
let file = '';

test.before(async () => {
  source = scratch('source');
  await openStore(source).close();
  mkdirSync(join(source, 'secrets'), { mode: 0o700 });
  writeFileSync(join(source, 'secrets', 'host.key'), hostKey, { mode: 0o600 });
  mkdirSync(join(source, 'ssh'), { mode: 0o700 });
  writeFileSync(join(source, 'ssh', 'ssh_host_ed25519_key'), sshKey, { mode: 0o600 });
  writeFileSync(join(source, 'db', 'settling.journal'), journal, { mode: 0o600 });
  file = join(scratch('backups'), 'state.mdb');
  const b = await adminCli(['backup', file, '--json'], { ROOTBOX_DATA_DIR: source });
  assert.is(b.code, 0, b.stderr);
  assert.is(JSON.parse(b.stdout).host_files, 2);
  assert.ok(!b.stdout.includes(hostKey.toString('hex')) && !b.stdout.includes(hostKey.toString('base64')), 'the key is never printed');
});

test('the backup carries the host key, SSH host keys and settlement journal; a restore puts them back and the store keeps none of them', async () => {
  const fresh = scratch('fresh');
  const r = await adminCli(['restore', file], { ROOTBOX_DATA_DIR: fresh });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /put back the host files it carries: secrets\/host\.key, ssh\/ssh_host_ed25519_key/);
  assert.not.match(r.stdout + r.stderr, /host\.key is missing/);
  assert.ok(readFileSync(join(fresh, 'secrets', 'host.key')).equals(hostKey));
  assert.is(statSync(join(fresh, 'secrets', 'host.key')).mode & 0o777, 0o600);
  assert.is(readFileSync(join(fresh, 'ssh', 'ssh_host_ed25519_key'), 'utf8'), sshKey);
  assert.is(readFileSync(join(fresh, 'db', 'settling.journal'), 'utf8'), journal);
  const live = await summarizeStore(join(fresh, 'db'), 'the restored store');
  const orig = await summarizeStore(join(source, 'db'), 'the source store');
  assert.is(live.records.meta, orig.records.meta, 'the carried files are not left in the live store');
});

test('a plain restore never replaces a host file that exists (another host’s key is kept, and said)', async () => {
  const there = scratch('there');
  mkdirSync(join(there, 'secrets'), { mode: 0o700 });
  const own = randomBytes(32);
  writeFileSync(join(there, 'secrets', 'host.key'), own, { mode: 0o600 });
  const r = await adminCli(['restore', file], { ROOTBOX_DATA_DIR: there });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /kept this host's own secrets\/host\.key/);
  assert.ok(readFileSync(join(there, 'secrets', 'host.key')).equals(own));
});

const rebuild = (dataDir: string, extra: string[] = [], env: Record<string, string> = {}) =>
  adminCli(['restore', '--from-backup', file, '--store', 's3://rootbox-lost/box', ...extra], {
    ROOTBOX_DATA_DIR: dataDir,
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test-secret',
    ...env,
  });
const noStaging = (dataDir: string) =>
  assert.not.ok(
    readdirSync(dirname(dataDir)).some((n) => n.includes('rebuilding')),
    'no staging dir left beside the data dir',
  );

test('a rebuild without the store’s credentials refuses before it makes anything', async () => {
  const fresh = scratch('nocreds');
  const r = await adminCli(['restore', '--from-backup', file, '--store', 's3://rootbox-lost/box'], { ROOTBOX_DATA_DIR: join(fresh, 'new') });
  assert.is(r.code, 1);
  assert.match(r.stderr, /set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/);
  assert.equal(readdirSync(fresh), []);
  noStaging(join(fresh, 'new'));
});

test('a rebuild refuses in cluster mode (the checkpoints open with the cluster’s secret)', async () => {
  const fresh = scratch('cluster');
  const r = await rebuild(fresh, [], { ROOTBOX_REGISTRY: 'postgres://rootbox@127.0.0.1:1/rootbox' });
  assert.is(r.code, 1);
  assert.match(r.stderr, /rebuilds a single box; in cluster mode/);
  assert.equal(readdirSync(fresh), []);
});

test('a rebuild refuses a data dir that holds anything, and leaves it as it was', async () => {
  const used = scratch('used');
  writeFileSync(join(used, 'something'), 'x');
  const r = await rebuild(used);
  assert.is(r.code, 1);
  assert.match(r.stderr, new RegExp(`${used} is not empty: restore --from-backup rebuilds a box into a fresh data dir only`));
  assert.equal(readdirSync(used), ['something']);
  noStaging(used);
});

test('a rebuild refuses a store it cannot reach: a clear error, nothing written (a new disk’s lost+found does not make a data dir used)', async () => {
  const fresh = scratch('unreachable');
  mkdirSync(join(fresh, 'lost+found'));
  mkdirSync(join(fresh, '.rebuilding-2026-01-01T00-00-00-000Z')); // what a killed rebuild left: removed
  const port = await freePort(); // nothing listens there
  const started = Date.now();
  const r = await rebuild(fresh, [], { ROOTBOX_S3_ENDPOINT: `http://127.0.0.1:${port}` });
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stderr, /the checkpoint store s3:\/\/rootbox-lost\/box cannot be reached .*nothing was written/);
  assert.not.match(r.stderr, /test-secret/, 'no credential in the message');
  assert.equal(readdirSync(fresh), ['lost+found'], 'the data dir is as it was');
  noStaging(fresh);
  assert.ok(Date.now() - started < 60_000);
});

test('a rebuild from a backup without a host key refuses unless one is given', async () => {
  const keyless = scratch('keyless');
  await openStore(keyless).close();
  const old = join(scratch('oldbackup'), 'old.mdb');
  assert.is((await adminCli(['backup', old], { ROOTBOX_DATA_DIR: keyless })).code, 0);
  const fresh = scratch('nokey');
  const absent = join(fresh, 'new'); // a data dir that does not exist yet is not made
  const r = await adminCli(['restore', '--from-backup', old, '--store', 's3://rootbox-lost/box'], {
    ROOTBOX_DATA_DIR: absent,
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test-secret',
  });
  assert.is(r.code, 1);
  assert.match(r.stderr, /carries no host key .* repeat with --host-key FILE/);
  assert.equal(readdirSync(fresh), [], 'nothing made, not even the data dir');
  noStaging(fresh);
});

test('a rebuild given a --host-key that does not exist says so, and makes nothing', async () => {
  const fresh = scratch('hostkeymissing');
  const r = await rebuild(join(fresh, 'new'), ['--host-key', join(fresh, 'no-such.key')]);
  assert.is(r.code, 1);
  assert.match(r.stderr, /--host-key .*no-such\.key does not exist/);
  assert.not.match(r.stderr, /ENOENT/);
  assert.equal(readdirSync(fresh), []);
});

test('a rebuild killed in its final renames: the daemon refuses the data dir, a rerun clears what it placed', async () => {
  const killed = scratch('killed');
  // what a kill -9 between two renames leaves: the mark, some of the box placed, the rest staged
  writeFileSync(join(killed, '.rebuild-incomplete'), 'restore --from-backup\n');
  mkdirSync(join(killed, 'servers', 'srv_x'), { recursive: true });
  writeFileSync(join(killed, 'servers', 'srv_x', 'disk.img'), 'seeded');
  mkdirSync(join(killed, '.rebuilding-2026-01-01T00-00-00-000Z', 'db'), { recursive: true });
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { dataDir: killed, runDir: join(killed, 'run') } });
  let made = false;
  const refused = await startDaemon(cfg, createLogger({ level: 'error', sink: () => {} }), (async () => {
    made = true;
    throw new Error('the runtime was made');
  }) as unknown as RuntimeMaker<Runtime>).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(refused instanceof AppError && refused.code === 'rebuild_incomplete', String(refused));
  assert.match(refused.detail, /interrupted/);
  assert.not.ok(made, 'refused before the runtime (its reconcile would take the seeded disks for orphans)');
  assert.ok(existsSync(join(killed, 'servers', 'srv_x', 'disk.img')), 'nothing removed by the refusal');
  // the rerun: not refused as a used data dir; what the killed one placed is cleared (here the
  // store cannot be reached, so it stops there and leaves the data dir empty)
  const port = await freePort();
  const r = await rebuild(killed, [], { ROOTBOX_S3_ENDPOINT: `http://127.0.0.1:${port}` });
  assert.is(r.code, 1, r.stdout);
  assert.not.match(r.stderr, /is not empty/);
  assert.match(r.stderr, /an interrupted rebuild left part of a box here/);
  assert.match(r.stderr, /cannot be reached/);
  assert.equal(readdirSync(killed), [], 'the partial box and the mark are gone');
});

test('a rebuild refuses while another holds the data dir, and leaves its staging dir alone', async () => {
  const busy = scratch('busy');
  const staging = join(busy, '.rebuilding-2026-01-01T00-00-00-000Z');
  mkdirSync(staging);
  const lock = await lockDataDir(busy); // the first rebuild (or a daemon) holds it
  try {
    const r = await rebuild(busy);
    assert.is(r.code, 1);
    assert.match(r.stderr, /holds dataDir/);
    assert.ok(existsSync(staging), 'the other rebuild’s staging dir is left');
  } finally {
    await lock.release();
  }
});

test('a plain restore leaves a link at a host file’s place (dangling or not) as it is, and says so', async () => {
  const there = scratch('link');
  mkdirSync(join(there, 'secrets'), { mode: 0o700 });
  symlinkSync(join(there, 'nowhere'), join(there, 'secrets', 'host.key'));
  const r = await adminCli(['restore', file], { ROOTBOX_DATA_DIR: there });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /kept this host's own secrets\/host\.key/);
  assert.ok(lstatSync(join(there, 'secrets', 'host.key')).isSymbolicLink());
  assert.not.ok(existsSync(join(there, 'nowhere')), 'nothing written through the link');
});

test.run();
