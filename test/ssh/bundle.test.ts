// The bundled daemon (dist/rootbox.js, what systemd runs) uses ssh2 from node_modules with its
// native crypto binding loaded, and its SSH listener answers a real client.

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { run } from '../helpers/run.js';

const root = new URL('../../', import.meta.url).pathname;

test('the bundle loads ssh2 natively from node_modules and serves SSH', async () => {
  if (!existsSync(join(root, 'dist/rootbox.js'))) {
    const b = await run(process.execPath, [join(root, 'build.mjs')], { timeoutMs: 120_000 });
    assert.is(b.code, 0, b.stderr);
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-ssh-bundle-'));
  const env = {
    ...process.env,
    ROOTBOX_DATA_DIR: dataDir,
    ROOTBOX_HTTP_HOST: '127.0.0.1',
    ROOTBOX_HTTP_PORT: '0',
    ROOTBOX_HTTPS_HOST: '127.0.0.1',
    ROOTBOX_HTTPS_PORT: '0',
    ROOTBOX_SSH_HOST: '127.0.0.1',
    ROOTBOX_SSH_PORT: '0',
    // A network of its own, removed below: `serve` keeps its network when it stops, by design.
    ROOTBOX_IMAGE_DIR: process.env.ROOTBOX_IMAGE_DIR ?? join(root, 'var', 'images'),
    ROOTBOX_BRIDGE: 'rbssh0',
    ROOTBOX_SUBNET: '10.195.0.0/24',
    ROOTBOX_NFT_TABLE: 'rbssh0',
    ROOTBOX_UID_START: String(1_800_000_000),
  };
  const child = spawn(process.execPath, [join(root, 'dist/rootbox.js'), 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    let out = '';
    const line = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no 'ssh listening' line in 30 s:\n${out}`)), 30_000);
      child.stdout.on('data', (d) => {
        out += d;
        for (const l of out.split('\n')) {
          if (l.includes('"ssh listening"')) {
            clearTimeout(t);
            resolve(JSON.parse(l));
          }
        }
      });
      child.stderr.on('data', (d) => (out += d));
      child.on('exit', (c) => reject(new Error(`daemon exited ${c}:\n${out}`)));
    });
    assert.is(line.nativeCrypto, true);
    assert.match(String(line.ssh2), /node_modules\/ssh2\/lib\/protocol\/crypto\.js$/);
    const scan = await run('ssh-keyscan', ['-p', String(line.port), '-t', 'ed25519', '127.0.0.1'], { timeoutMs: 10_000 });
    assert.match(scan.stdout, /ssh-ed25519 AAAA/);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    await run('ip', ['link', 'del', 'rbssh0']).catch(() => {});
    for (const family of ['inet', 'bridge']) await run('nft', ['delete', 'table', family, 'rbssh0']).catch(() => {});
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.run();
