// A box that loses its disk comes back (issue 37 item 5), end to end: a real daemon with real runc
// servers and its checkpoints in a real S3 store (Ceph RGW, test/helpers/s3.ts); two accounts
// (one credited), a server that sleeps (its automatic checkpoint at sleep holds what it wrote) and
// one that runs an app and holds a 20 MB random file (a manual checkpoint). The state backup is
// taken, the daemon stopped and its data dir removed with everything the runtime made (the test
// daemon's own stop: containers, mounts, network, files). `rootbox restore --from-backup FILE
// --store s3://…` rebuilds a fresh data dir, and a daemon started on it (same runtime names)
// serves every server's HTTPS page (the app and the static page of the sleeping one), takes an
// SSH login that checks the old host key (OpenSSH, StrictHostKeyChecking=yes against the
// known_hosts the first login wrote), has the files byte-identical (sha256), takes the old api
// keys and shows the same balances. A third server without any checkpoint comes back with its
// keys and a fresh disk (its hostname set), and the CLI says so by name. A store whose manifests the backup's key does not open is
// refused with nothing written.

import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { openStore } from '../../src/store/index.js';
import { adminCli } from '../helpers/admincli.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { startS3, type TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { send } from '../http/contract.js';
import { RUN_SH } from '../runtime/helpers/env.js';

const PREFIX = 'box';
let s3: TestS3;
let bucket = '';
let a: TestDaemon | undefined;
let b: TestDaemon | undefined;
const scratch: string[] = [];
const dir = (tag: string) => {
  const d = mkdtempSync(join(tmpdir(), `rbx-rebuild-${tag}-`));
  scratch.push(d);
  return d;
};
const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

interface Srv {
  id: string;
  key: string;
  slug: string;
  keyFile: string;
  files: Record<string, string>;
}
let runner: Srv;
let sleeper: Srv;
let lost: Srv;
const APP_SH = RUN_SH.replace('/root/www/index.html', '/root/app.txt');

const settings = (s3store: string, endpoint: string) => ({
  publicIp: '127.0.0.1',
  hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 } },
  proxy: { idleTimeout: 2000, idleCheckInterval: 200, dozeTimeout: 0 },
  checkpoints: { store: s3store, s3: { endpoint, connectTimeout: '2s', timeout: '30s', maxAttempts: 2 }, interval: '1h', gcInterval: 0 },
});

test.before(async () => {
  s3 = await startS3();
  bucket = await s3.bucket();
  Object.assign(process.env, s3.env);
});
test.after(async () => {
  await b?.stop();
  await a?.stop();
  await s3?.stop();
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
  for (const [k, v] of [
    ['AWS_ACCESS_KEY_ID', saved.id],
    ['AWS_SECRET_ACCESS_KEY', saved.secret],
  ] as const)
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

const api = (d: TestDaemon, key: string, method: string, path: string, body?: unknown) =>
  send(d.http, 'api.localhost', method, path, { headers: { authorization: `Bearer ${key}` }, ...(body === undefined ? {} : { body }) });

/** A command in the server through its exec API; stdout trimmed. */
async function exec(d: TestDaemon, s: Srv, command: string): Promise<string> {
  const r = await api(d, s.key, 'POST', `/servers/${s.id}/exec`, { command });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.exit_code, 0, r.json.stderr);
  return String(r.json.stdout).trim();
}

/** GET https://<slug>.localhost/path through the daemon's HTTPS listener, trusting its CA. */
function httpsGet(d: TestDaemon, slug: string, path = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: d.https, servername: `${slug}.localhost`, path, headers: { host: `${slug}.localhost` }, ca: d.ca, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
    req.end();
  });
}

let knownHosts = '';
/** OpenSSH as root@ the daemon's SSH port with the server's key; the host key checked against known_hosts. */
const ssh = (d: TestDaemon, s: Srv, command: string, check: 'accept-new' | 'yes') =>
  run(
    'ssh',
    [
      '-p',
      String(d.daemon.ssh.port),
      '-i',
      s.keyFile,
      '-F',
      '/dev/null',
      '-o',
      'IdentitiesOnly=yes',
      '-o',
      'BatchMode=yes',
      '-o',
      `StrictHostKeyChecking=${check}`,
      '-o',
      `UserKnownHostsFile=${knownHosts}`,
      '-o',
      'HostKeyAlias=rootbox-rebuild-test',
      'root@127.0.0.1',
      command,
    ],
    { timeoutMs: 60_000 },
  );

async function create(d: TestDaemon, keys: string): Promise<Srv> {
  const c = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(c.status, 200, c.text);
  const keyFile = join(keys, `${c.json.id}.key`);
  writeFileSync(keyFile, c.json.ssh_private_key, { mode: 0o600 });
  return { id: c.json.id, key: c.json.api_key, slug: d.daemon.store.servers.get(c.json.id)!.slug, keyFile, files: {} };
}

test('a box rebuilt from its state backup and the S3 store serves every server with its keys, files and balances', async () => {
  const store = `s3://${bucket}/${PREFIX}`;
  a = await startTestDaemon(settings(store, s3.endpoint));
  if (!(a.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  const keys = dir('keys');
  knownHosts = join(keys, 'known_hosts');
  runner = await create(a, keys);
  sleeper = await create(a, keys);
  const credit = await adminCli(['accounts', 'credit', runner.id, '7.25'], { ROOTBOX_DATA_DIR: a.dataDir });
  assert.is(credit.code, 0, credit.stderr);

  // the sleeper writes a file and a page, then falls asleep: its automatic checkpoint holds them
  sleeper.files['/root/notes.bin'] = await exec(
    a,
    sleeper,
    'head -c 3000000 /dev/urandom > /root/notes.bin && sync && sha256sum /root/notes.bin | cut -d" " -f1',
  );
  await exec(a, sleeper, 'echo "sleeper page $(hostname)" > /root/www/index.html && sync');
  await until('the sleeper to sleep', () => a!.daemon.presence.state(sleeper.id) === 'sleeping', 30_000);
  await until('its automatic checkpoint', async () => a!.daemon.store.checkpoints.list(sleeper.id).some((c) => c.kind === 'auto'), 60_000);

  // a third server whose only checkpoint is deleted: what a server created since its last one is
  lost = await create(a, keys);
  await exec(a, lost, 'echo gone > /root/gone && sync');
  await until('the third to sleep', () => a!.daemon.presence.state(lost.id) === 'sleeping', 30_000);
  await until('its automatic checkpoint', async () => a!.daemon.store.checkpoints.list(lost.id).length === 1, 60_000);
  const only = a.daemon.store.checkpoints.list(lost.id)[0].id;
  assert.is((await api(a, lost.key, 'DELETE', `/servers/${lost.id}/checkpoints/${only}`)).status, 200);

  // the runner: SSH login (known_hosts learns the host key), held awake by a session, an app, a 20 MB file
  const first = await ssh(a, runner, 'echo hello', 'accept-new');
  assert.is(first.code, 0, first.stderr);
  assert.is(first.stdout.trim(), 'hello');
  const hold = run(
    'ssh',
    [
      '-p',
      String(a.daemon.ssh.port),
      '-i',
      runner.keyFile,
      '-F',
      '/dev/null',
      '-o',
      'BatchMode=yes',
      '-o',
      'StrictHostKeyChecking=no',
      '-o',
      `UserKnownHostsFile=/dev/null`,
      'root@127.0.0.1',
      'sleep 900',
    ],
    {
      timeoutMs: 1_000_000,
    },
  );
  runner.files['/root/big'] = await exec(a, runner, 'head -c 20000000 /dev/urandom > /root/big && sync && sha256sum /root/big | cut -d" " -f1');
  await exec(a, runner, `echo "app of $(hostname)" > /root/app.txt && cat > /root/run.sh <<'EOF'\n${APP_SH}EOF\nchmod +x /root/run.sh && sync`);
  await until('the app to answer', async () => (await httpsGet(a!, runner.slug)).body.startsWith('app of'), 60_000);
  const cp = await api(a, runner.key, 'POST', `/servers/${runner.id}/checkpoints`, { comment: 'before the loss' });
  assert.is(cp.status, 201, cp.text);
  assert.is(a.daemon.presence.state(runner.id), 'running');

  const before = {
    runner: (await api(a, runner.key, 'GET', '/credits')).json.balance_usd,
    sleeper: (await api(a, sleeper.key, 'GET', '/credits')).json.balance_usd,
    app: (await httpsGet(a, runner.slug)).body,
    page: (await httpsGet(a, sleeper.slug)).body,
    ca: a.ca,
  };
  assert.is(before.runner, 7.25);
  assert.match(before.page, /^sleeper page/);
  const file = join(dir('backup'), 'state.mdb');
  const bk = await adminCli(['backup', file, '--json'], { ROOTBOX_DATA_DIR: a.dataDir });
  assert.is(bk.code, 0, bk.stderr);
  assert.not.match(bk.stdout + bk.stderr, /host\.key.*[0-9a-f]{64}/, 'no key printed');

  // the disk is lost: the daemon stopped, everything its runtime made removed with the data dir
  const runtime = a.cfg.runtime;
  const oldDir = a.dataDir;
  await a.stop();
  a = undefined;
  await hold.catch(() => undefined);
  assert.throws(() => readdirSync(oldDir));

  const fresh = dir('fresh');
  const env = { ROOTBOX_DATA_DIR: fresh, ROOTBOX_S3_ENDPOINT: s3.endpoint, ...s3.env };
  const r = await adminCli(['restore', '--from-backup', file, '--store', store, '--json'], env);
  assert.is(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  const row = (id: string) => out.servers.find((s: { id: string }) => s.id === id);
  assert.is(row(runner.id).checkpoint, cp.json.id, 'the runner from its newest checkpoint');
  assert.is(row(runner.id).desired, 'running');
  assert.is(row(sleeper.id).disk, 'checkpoint');
  assert.is(row(sleeper.id).desired, 'stopped');
  assert.is(row(lost.id).disk, 'fresh_disk');
  assert.is(row(lost.id).checkpoint, null);
  assert.match(row(lost.id).note, /no checkpoint in the store; came back with a fresh empty disk: its files are lost/);
  assert.is(out.fresh_disk, 1);
  assert.not.match(r.stdout, /[0-9a-f]{64}/, 'no secret printed');
  // the right bucket under another prefix: refused, not every server with an empty disk
  const elsewhere = dir('elsewhere');
  const wrong = await adminCli(['restore', '--from-backup', file, '--store', `s3://${bucket}/other`], { ...env, ROOTBOX_DATA_DIR: elsewhere });
  assert.is(wrong.code, 1, wrong.stdout);
  assert.match(wrong.stderr, /s3:\/\/.*\/other holds none of the \d+ checkpoints .* lists: is --store this box's bucket and prefix/);
  assert.equal(readdirSync(elsewhere), []);
  const human = await adminCli(['restore', '--from-backup', file, '--store', store], { ...env, ROOTBOX_DATA_DIR: dir('again') });
  assert.is(human.code, 0, human.stderr);
  assert.match(human.stdout, new RegExp(`${runner.id} \\(${runner.slug}, account [^)]+\\): disk from checkpoint ${cp.json.id} of `));
  assert.match(
    human.stdout,
    new RegExp(`${lost.id} \\(${lost.slug}, account [^)]+\\): NO CHECKPOINT USED; stays asleep with the daemon — no checkpoint in the store`),
  );
  assert.match(human.stdout, /2 of 3 servers came back from a checkpoint; 1 with a fresh empty disk/);

  b = await startTestDaemon({
    ...settings(store, s3.endpoint),
    dataDir: fresh,
    runtime: { bridge: runtime.bridge, subnet: runtime.subnet, nftTable: runtime.nftTable, uidStart: runtime.uidStart, uidRanges: runtime.uidRanges },
  });
  assert.is(b.ca, before.ca, 'the same CA: its certificate came back with the backup');
  assert.is(b.daemon.presence.state(runner.id), 'running');
  assert.is((await httpsGet(b, runner.slug)).body, before.app, 'the app answers its HTTPS page');
  assert.is((await httpsGet(b, sleeper.slug)).body, before.page, 'the sleeping server’s page');
  assert.is((await api(b, runner.key, 'GET', '/credits')).json.balance_usd, before.runner, 'api key and balance');
  assert.is((await api(b, sleeper.key, 'GET', '/credits')).json.balance_usd, before.sleeper);
  for (const s of [runner, sleeper]) {
    const login = await ssh(b, s, `sha256sum ${Object.keys(s.files)[0]} | cut -d" " -f1`, 'yes');
    assert.is(login.code, 0, `SSH with the old host key pinned: ${login.stderr}`);
    assert.is(login.stdout.trim(), Object.values(s.files)[0], 'byte-identical');
  }
  // the one without a checkpoint: its records and keys, a fresh disk personalised like a new server's
  const fresh3 = await ssh(b, lost, 'cat /etc/hostname; test -e /root/gone && echo still-there || echo absent', 'yes');
  assert.is(fresh3.code, 0, fresh3.stderr);
  assert.equal(fresh3.stdout.trim().split('\n'), [lost.slug, 'absent']);
  assert.is((await api(b, lost.key, 'GET', '/credits')).status, 200);
  const listed = await api(b, runner.key, 'GET', `/servers/${runner.id}/checkpoints`);
  assert.ok(listed.json.checkpoints.some((c: { id: string }) => c.id === cp.json.id));
});

test('a store whose checkpoints do not open with the backup’s key is refused, nothing written', async () => {
  // another box: a store with only its own host key
  const other = dir('other');
  await openStore(other).close();
  const file = join(dir('otherbackup'), 'other.mdb');
  const made = await adminCli(['backup', file], { ROOTBOX_DATA_DIR: other });
  assert.is(made.code, 0, made.stderr);
  // a backup without a host key is refused before the store is read; give one of its own
  const key = join(other, 'stray.key');
  writeFileSync(key, Buffer.alloc(32, 7), { mode: 0o600 });
  const fresh = dir('mismatch');
  const r = await adminCli(['restore', '--from-backup', file, '--store', `s3://${bucket}/${PREFIX}`, '--host-key', key], {
    ROOTBOX_DATA_DIR: fresh,
    ROOTBOX_S3_ENDPOINT: s3.endpoint,
    ...s3.env,
  });
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stderr, /none of the \d+ checkpoint manifests in s3:\/\/.* opens with the host key of/);
  assert.equal(readdirSync(fresh), []);
  assert.not.ok(
    readdirSync(dirname(fresh)).some((n) => n.startsWith(`.${fresh.split('/').pop()}.rebuilding-`)),
    'no staging dir left',
  );
});

test('a store that refuses the credentials is refused with what it said, nothing written', async () => {
  const file = join(dir('refusedbackup'), 'b.mdb');
  const src = dir('refusedsrc');
  await openStore(src).close();
  assert.is((await adminCli(['backup', file], { ROOTBOX_DATA_DIR: src })).code, 0);
  const fresh = dir('refused');
  const key = join(dir('k'), 'host.key');
  writeFileSync(key, Buffer.alloc(32, 9), { mode: 0o600 });
  const r = await adminCli(['restore', '--from-backup', file, '--store', `s3://${bucket}/${PREFIX}`, '--host-key', key], {
    ROOTBOX_DATA_DIR: fresh,
    ROOTBOX_S3_ENDPOINT: s3.endpoint,
    AWS_ACCESS_KEY_ID: 'nobody',
    AWS_SECRET_ACCESS_KEY: 'not-the-secret',
  });
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stderr, /the checkpoint store s3:\/\/.* refused .*HTTP 403.*nothing was written: check AWS_ACCESS_KEY_ID/);
  assert.not.match(r.stderr, /not-the-secret/);
  assert.equal(readdirSync(fresh), []);
});

test.run();
