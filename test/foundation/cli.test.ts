import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../helpers/run.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
const tmp = mkdtempSync(join(tmpdir(), 'rbx-cli-'));
chmodSync(tmp, 0o755); // serve refuses a data dir whose parent the servers' uids cannot traverse
// The daemon started here gets a network of its own (bridge, subnet, nft tables, uid ranges),
// removed again afterwards: `serve` keeps its network and containers when it stops, by design.
const net = {
  ROOTBOX_IMAGE_DIR: process.env.ROOTBOX_IMAGE_DIR ?? new URL('../../var/images', import.meta.url).pathname,
  ROOTBOX_BRIDGE: 'rbcli0',
  ROOTBOX_SUBNET: '10.196.0.0/24',
  ROOTBOX_NFT_TABLE: 'rbcli0',
  ROOTBOX_UID_START: String(1_900_000_000),
};
test.after(async () => {
  await run('ip', ['link', 'del', net.ROOTBOX_BRIDGE]).catch(() => {});
  for (const family of ['inet', 'bridge']) await run('nft', ['delete', 'table', family, net.ROOTBOX_NFT_TABLE]).catch(() => {});
  rmSync(tmp, { recursive: true, force: true });
});

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });

test('serve with embedded defaults answers healthz over HTTPS (generated CA) and HTTP, and SIGTERM exits 0', async () => {
  const [http, https] = [await freePort(), await freePort()];
  const dataDir = join(tmp, 'serve');
  const child = spawn(bin, ['serve'], {
    env: {
      ...process.env,
      ...net,
      ROOTBOX_DATA_DIR: dataDir,
      ROOTBOX_HTTP_PORT: String(http),
      ROOTBOX_HTTPS_PORT: String(https),
      ROOTBOX_HTTP_HOST: '127.0.0.1',
      ROOTBOX_HTTPS_HOST: '127.0.0.1',
      ROOTBOX_SSH_PORT: String(await freePort()),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('close', (c) => r(c)));
  try {
    for (let i = 0; i < 300 && !out.includes('edge listening') && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(out.includes('edge listening'), out);
    assert.match(out, new RegExp(`"ca":"${join(dataDir, 'tls', 'ca.pem')}"`), 'prints where the CA is');
    const a = await run('curl', [
      '-sS',
      '--cacert',
      join(dataDir, 'tls', 'ca.pem'),
      '--resolve',
      `api.localhost:${https}:127.0.0.1`,
      `https://api.localhost:${https}/healthz`,
    ]);
    assert.equal(JSON.parse(a.stdout), { ok: true, service: 'rootbox' });
    const b = await run('curl', ['-sS', '--resolve', `api.localhost:${http}:127.0.0.1`, `http://api.localhost:${http}/healthz`]);
    assert.equal(JSON.parse(b.stdout), { ok: true, service: 'rootbox' });
    child.kill('SIGHUP');
    await new Promise((r) => setTimeout(r, 200));
    assert.is(child.exitCode, null, 'SIGHUP reloads, it does not stop the daemon');
    child.kill('SIGTERM');
    assert.is(await exited, 0);
    assert.match(out, /"msg":"stopped"/);
    for (const line of out.trim().split('\n')) JSON.parse(line);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
});

test('serve refuses a bad config value, naming the key, with exit code 1', async () => {
  const r = await run(bin, ['serve'], { env: { ...process.env, ...net, ROOTBOX_DATA_DIR: join(tmp, 'bad'), ROOTBOX_SSH_PORT: 'twenty-two' } });
  assert.is(r.code, 1);
  assert.match(r.stderr, /config key `ssh\.port` \(from ROOTBOX_SSH_PORT\)/);
});

test('doctor tells the truth about runc and exits 0 only when every required check passes', async () => {
  const r = await run(bin, ['doctor']);
  const runc = await run('runc', ['--version']).catch(() => ({ code: 127, stdout: '' }));
  if (runc.code === 0) assert.ok(r.stdout.includes(runc.stdout.split('\n')[0]), r.stdout);
  else assert.match(r.stdout, /MISSING\s+runc/);
  const missing = /MISSING/.test(r.stdout);
  assert.is(r.code, missing ? 1 : 0, r.stdout);
  for (const name of ['root', 'runc', 'overlayfs', 'loop devices', 'user namespaces', 'idmapped mounts', 'nftables', 'cgroups']) {
    assert.match(r.stdout, new RegExp(`\\b${name}\\b`));
  }
});

test('an unknown command prints usage and exits 2', async () => {
  const r = await run(bin, ['frobnicate']);
  assert.is(r.code, 2);
  assert.match(r.stderr, /usage: rootbox/);
});

test.run();
