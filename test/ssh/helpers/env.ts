// Test environment for the SSH front door: the shared real test daemon (LMDB, runc runtime on its
// own bridge, ssh2 listener on a free loopback port), optionally in a data dir that outlives one
// daemon (host key stability); server records with real key pairs written as identity files,
// with or without a real container behind them; and OpenSSH client argument lists.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Daemon } from '../../../src/main.js';
import type { Runtime } from '../../../src/runtime/index.js';
import { generateServerKeyPair } from '../../../src/ssh/index.js';
import type { ServerRecord } from '../../../src/store/index.js';
import { startTestDaemon } from '../../helpers/daemon.js';

export interface SshTestDaemon {
  daemon: Daemon<Runtime>;
  port: number;
  dataDir: string;
  logs: Record<string, unknown>[];
  /** Stops the daemon (deleting its containers); removes the data dir unless keepDir. */
  stop(opts?: { keepDir?: boolean }): Promise<void>;
}

export async function startSshDaemon(opts: { dataDir?: string; ssh?: Record<string, unknown>; proxy?: Record<string, unknown> } = {}): Promise<SshTestDaemon> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'rbx-ssh-'));
  const t = await startTestDaemon({ dataDir, ssh: { host: '127.0.0.1', port: 0, ...opts.ssh }, ...(opts.proxy ? { proxy: opts.proxy } : {}) });
  return {
    daemon: t.daemon,
    port: t.daemon.ssh.port,
    dataDir,
    logs: t.logs,
    async stop({ keepDir = false } = {}) {
      await t.stop();
      if (!keepDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface TestServer {
  rec: ServerRecord;
  /** Path of the private key file (mode 0600) for `ssh -i`. */
  keyFile: string;
}

let seq = 0;

/**
 * Inserts a server record with a fresh key pair into the daemon's store; with `container`, also
 * creates its real runc container the way the hosting API does (record first, then runtime).
 */
export async function addServer(d: SshTestDaemon, slug: string, over: Partial<ServerRecord> = {}, container = false): Promise<TestServer> {
  const id = `srv_${slug.replace(/-/g, '')}${++seq}`;
  const pair = generateServerKeyPair(id);
  const rec: ServerRecord = {
    id,
    accountId: 'acc_test',
    slug,
    sshPublicKey: pair.publicKey,
    keyFingerprint: pair.fingerprint,
    memoryBytes: 512 << 20,
    diskBytes: 1 << 30,
    neverSleep: false,
    suspended: false,
    flag: null,
    createdAt: Date.now(),
    ...over,
  };
  if (!d.daemon.store.servers.insert(rec)) throw new Error(`slug ${slug} taken`);
  if (container) await d.daemon.runtime.create({ id, slug, memoryBytes: rec.memoryBytes, diskBytes: rec.diskBytes });
  const keyFile = join(d.dataDir, `${id}.key`);
  writeFileSync(keyFile, pair.privateKey, { mode: 0o600 });
  return { rec, keyFile };
}

/** A key pair no server has, written as an identity file. */
export function strayKey(dir: string): string {
  const file = join(dir, `stray-${++seq}.key`);
  writeFileSync(file, generateServerKeyPair('stray').privateKey, { mode: 0o600 });
  return file;
}

export const CLIENT_OPTS = [
  '-o',
  'StrictHostKeyChecking=no',
  '-o',
  'UserKnownHostsFile=/dev/null',
  '-o',
  'IdentitiesOnly=yes',
  '-o',
  'BatchMode=yes',
  '-F',
  '/dev/null',
];

/** `ssh` arguments up to and including the destination. */
export function sshArgs(port: number, keyFile: string, extra: string[] = [], user = 'root'): string[] {
  return ['-p', String(port), '-i', keyFile, ...CLIENT_OPTS, ...extra, `${user}@127.0.0.1`];
}
