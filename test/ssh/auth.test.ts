// The SSH front door without containers: host keys, algorithms, who may log in and how often.
// Every check drives the real OpenSSH client (or ssh2's client for a forged signature) against
// the daemon's real listener with server records in a real LMDB store.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import ssh2 from 'ssh2';
import { fingerprintOf, generateServerKeyPair } from '../../src/ssh/index.js';
import { run } from '../helpers/run.js';
import { addServer, CLIENT_OPTS, sshArgs, startSshDaemon, strayKey, type SshTestDaemon } from './helpers/env.js';

const daemons: SshTestDaemon[] = [];
async function daemon(opts: Parameters<typeof startSshDaemon>[0] = {}) {
  const d = await startSshDaemon(opts);
  daemons.push(d);
  return d;
}
test.after(async () => {
  for (const d of daemons.splice(0)) await d.stop().catch(() => {});
});

const keyscan = async (port: number) => {
  const r = await run('ssh-keyscan', ['-p', String(port), '-t', 'ed25519,ecdsa', '127.0.0.1'], { timeoutMs: 10_000 });
  return r.stdout
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => l.split(' ').slice(1, 3).join(' '))
    .sort();
};

test('the key pair for a new server is OpenSSH format that ssh-keygen reads back to the same public key and fingerprint', async () => {
  const d = await daemon();
  const pair = generateServerKeyPair('srv_keygen');
  assert.match(pair.privateKey, /^-----BEGIN OPENSSH PRIVATE KEY-----\n/);
  const { keyFile, rec } = await addServer(d, 'keygen-check');
  const y = await run('ssh-keygen', ['-y', '-f', keyFile]);
  assert.is(y.code, 0, y.stderr);
  assert.is(y.stdout.trim().split(' ').slice(0, 2).join(' '), rec.sshPublicKey.split(' ').slice(0, 2).join(' '));
  const l = await run('ssh-keygen', ['-l', '-E', 'sha256', '-f', keyFile]);
  assert.is(l.stdout.split(' ')[1], `SHA256:${rec.keyFingerprint}`);
  assert.is(fingerprintOf(pair.publicKey), pair.fingerprint);
});

test('every generated key pair reads back whole: 3000 server keys all have a 32-byte ed25519 public key', () => {
  // ssh2's generator drops leading zero bytes (about 1 pair in 256): 3000 pairs without the
  // regeneration would miss this with odds of about 1 in 100,000
  for (let i = 0; i < 3000; i++) {
    const pair = generateServerKeyPair(`srv_many${i}`);
    const blob = Buffer.from(pair.publicKey.split(' ')[1], 'base64');
    assert.is(blob.length, 4 + 11 + 4 + 32, pair.publicKey);
    const priv = ssh2.utils.parseKey(pair.privateKey);
    assert.ok(!(priv instanceof Error) && !Array.isArray(priv) && priv.getPublicSSH().equals(blob), pair.privateKey);
  }
});

test('host keys are generated once and clients see the same keys after a restart', async () => {
  const d1 = await startSshDaemon();
  let first: string[];
  try {
    first = await keyscan(d1.port);
    assert.is(first.length, 2, 'ed25519 and ecdsa host keys offered');
    assert.ok(first.some((k) => k.startsWith('ssh-ed25519 ')));
    assert.ok(first.some((k) => k.startsWith('ecdsa-sha2-nistp256 ')));
    const onDisk = ['ssh_host_ed25519_key.pub', 'ssh_host_ecdsa_key.pub']
      .map((f) =>
        readFileSync(join(d1.dataDir, 'ssh', f), 'utf8')
          .split(' ')
          .slice(0, 2)
          .join(' '),
      )
      .sort();
    assert.equal(first, onDisk);
  } finally {
    await d1.stop({ keepDir: true });
  }
  const d2 = await daemon({ dataDir: d1.dataDir });
  assert.equal(await keyscan(d2.port), first);
});

test('only modern algorithms are negotiated: SHA-1 kex, CBC ciphers and RSA host keys are refused', async () => {
  const d = await daemon();
  const { keyFile } = await addServer(d, 'algo-check');
  for (const opt of ['KexAlgorithms=diffie-hellman-group14-sha1', 'Ciphers=aes128-cbc', 'HostKeyAlgorithms=ssh-rsa', 'Ciphers=aes128-ctr -o MACs=hmac-sha1']) {
    const r = await run(
      'ssh',
      [
        ...sshArgs(
          d.port,
          keyFile,
          opt.split(' ').flatMap((o) => (o === '-o' ? [] : ['-o', o])),
        ),
        'true',
      ],
      { timeoutMs: 15_000 },
    );
    assert.is(r.code, 255, opt);
    assert.match(r.stderr, /no matching/i, `${opt}: ${r.stderr}`);
  }
  const ok = await run('ssh', [...sshArgs(d.port, keyFile, ['-v']), 'true'], { timeoutMs: 15_000 });
  assert.match(ok.stderr, /kex: algorithm: (curve25519-sha256|sntrup)/);
  assert.match(ok.stderr, /kex: server->client cipher: (chacha20-poly1305@openssh.com|aes\d+-gcm@openssh.com)/);
});

test("a server's own key logs in as root; a key nobody has is refused", async () => {
  const d = await daemon();
  const { keyFile, rec } = await addServer(d, 'login-ok');
  const ok = await run('ssh', [...sshArgs(d.port, keyFile), 'true'], { timeoutMs: 15_000 });
  // No container behind this record: the login succeeds and the session says why it cannot run.
  assert.match(ok.stderr, /rootbox: server srv_\w+ (does not exist|is not known to the container runtime)/, ok.stderr);
  assert.ok(d.logs.some((l) => l.msg === 'ssh login' && l.server === rec.id));
  const bad = await run('ssh', [...sshArgs(d.port, strayKey(d.dataDir)), 'true'], { timeoutMs: 15_000 });
  assert.is(bad.code, 255);
  assert.match(bad.stderr, /Permission denied \(publickey\)/);
});

test('only root may log in, even with the right key', async () => {
  const d = await daemon();
  const { keyFile } = await addServer(d, 'user-check');
  const r = await run('ssh', [...sshArgs(d.port, keyFile, [], 'login-ok'), 'true'], { timeoutMs: 15_000 });
  assert.is(r.code, 255);
  assert.match(r.stderr, /Permission denied \(publickey\)/);
});

test('password and keyboard-interactive are never offered', async () => {
  const d = await daemon();
  const r = await run(
    'ssh',
    [
      '-p',
      String(d.port),
      ...CLIENT_OPTS,
      '-o',
      'PubkeyAuthentication=no',
      '-o',
      'PreferredAuthentications=password,keyboard-interactive',
      '-v',
      'root@127.0.0.1',
      'true',
    ],
    { timeoutMs: 15_000 },
  );
  assert.is(r.code, 255);
  assert.match(r.stderr, /Authentications that can continue: publickey\r?\n/);
  assert.not.match(r.stderr, /password:|Next authentication method: (password|keyboard)/);
});

test("server A's public key with a signature from another key is refused (the signature is verified)", async () => {
  const d = await daemon();
  const a = await addServer(d, 'forge-target');
  const real = ssh2.utils.parseKey(a.rec.sshPublicKey);
  const forged = ssh2.utils.parseKey(generateServerKeyPair('attacker').privateKey);
  if (real instanceof Error || Array.isArray(real) || forged instanceof Error || Array.isArray(forged)) throw new Error('parse');
  forged.getPublicSSH = () => real.getPublicSSH();
  const outcome = await new Promise<string>((resolve) => {
    const c = new ssh2.Client();
    c.on('ready', () => {
      c.end();
      resolve('logged in');
    });
    c.on('error', (e) => resolve(`error: ${e.message}`));
    c.connect({
      host: '127.0.0.1',
      port: d.port,
      username: 'root',
      authHandler: [{ type: 'publickey', username: 'root', key: forged }] as never,
      readyTimeout: 10_000,
    });
  });
  assert.match(outcome, /All configured authentication methods failed/);
  // The failure is counted (and logged) when the connection closes.
  for (let i = 0; i < 50 && !d.logs.some((l) => l.msg === 'ssh login failed'); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(d.logs.some((l) => l.msg === 'ssh login failed' && l.why === 'bad signature'));
});

test("a key of server A opens A only: B being suspended does not affect A, and B's key gets B's refusal", async () => {
  const d = await daemon();
  const a = await addServer(d, 'alpha-box');
  const b = await addServer(d, 'bravo-box', { suspended: true });
  const ra = await run('ssh', [...sshArgs(d.port, a.keyFile), 'true'], { timeoutMs: 15_000 });
  assert.not.match(ra.stderr, /suspended/);
  const rb = await run('ssh', [...sshArgs(d.port, b.keyFile), 'true'], { timeoutMs: 15_000 });
  assert.is(rb.code, 1);
  assert.match(rb.stderr, /rootbox: server bravo-box \(.+\) is suspended/);
  const logins = d.logs.filter((l) => l.msg === 'ssh login').map((l) => l.slug);
  assert.equal(logins, ['alpha-box', 'bravo-box']);
});

/** Offers `password` (never offered by the server) `tries` times through ssh2's client; resolves when the connection is gone. */
function passwordGuesses(port: number, tries: number): Promise<void> {
  return new Promise((resolve) => {
    const c = new ssh2.Client();
    c.on('error', () => {});
    c.on('close', () => resolve());
    c.on('ready', () => c.end());
    const methods = Array.from({ length: tries }, (_, i) => ({ type: 'password', username: 'root', password: `guess${i}` }));
    c.connect({ host: '127.0.0.1', port, username: 'root', authHandler: methods as never, readyTimeout: 10_000 });
  });
}

test('failed logins are limited per address, but the right key still logs in from an address over its limit', async () => {
  const d = await daemon({ ssh: { maxAuthFailures: 3, authFailureWindow: '30s' } });
  const { keyFile } = await addServer(d, 'limit-check');
  const stray = strayKey(d.dataDir);
  // Offering several wrong keys before the right one (an agent full of keys) is one login, not a failure.
  const many = ['-i', strayKey(d.dataDir), '-i', strayKey(d.dataDir), '-i', strayKey(d.dataDir), '-i', strayKey(d.dataDir)];
  for (let i = 0; i < 2; i++) {
    const r = await run('ssh', [...many, ...sshArgs(d.port, keyFile), 'true'], { timeoutMs: 15_000 });
    assert.match(r.stderr, /rootbox: server srv_\w+ (does not exist|is not known to the container runtime)/, r.stderr);
  }
  const failed = () => d.logs.filter((l) => l.msg === 'ssh login failed');
  for (let i = 0; i < 3; i++) {
    const r = await run('ssh', [...sshArgs(d.port, stray), 'true'], { timeoutMs: 15_000 });
    assert.match(r.stderr, /Permission denied/);
  }
  for (let i = 0; i < 50 && failed().length < 3; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(
    failed().map((l) => l.blocked),
    [false, false, true],
  );
  // Someone else on this address (a shared NAT) used up its budget: the owner's key still gets in,
  // alone or offered after wrong keys.
  const owner = await run('ssh', [...sshArgs(d.port, keyFile), 'true'], { timeoutMs: 15_000 });
  assert.match(owner.stderr, /rootbox: server srv_\w+ (does not exist|is not known to the container runtime)/, owner.stderr);
  const agent = await run('ssh', [...many, ...sshArgs(d.port, keyFile), 'true'], { timeoutMs: 15_000 });
  assert.match(agent.stderr, /rootbox: server srv_\w+ (does not exist|is not known to the container runtime)/, agent.stderr);
  // A wrong key is still refused; a password guesser is cut off after its first guess.
  const wrong = await run('ssh', [...sshArgs(d.port, stray), 'true'], { timeoutMs: 15_000 });
  assert.match(wrong.stderr, /Permission denied/);
  await passwordGuesses(d.port, 5);
  for (let i = 0; i < 50 && failed().length < 5; i++) await new Promise((r) => setTimeout(r, 50));
  const last = failed()[4];
  assert.is(last?.why, 'method password is not offered');
  assert.is(last?.attempts, 1);
});

test('an address under its failure limit gets the usual attempts per connection', async () => {
  const d = await daemon({ ssh: { maxAuthFailures: 3 } });
  await passwordGuesses(d.port, 5);
  for (let i = 0; i < 50 && !d.logs.some((l) => l.msg === 'ssh login failed'); i++) await new Promise((r) => setTimeout(r, 50));
  assert.is(d.logs.find((l) => l.msg === 'ssh login failed')?.attempts, 5);
});

test.run();
