// Test environment for the SSH front door: a real daemon (real LMDB, real ssh2 listener on a
// free loopback port) in a data dir that can outlive one daemon (host key stability), server
// records with real key pairs written as identity files, and OpenSSH client argument lists.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../../src/config/index.js';
import { createLogger } from '../../../src/log/index.js';
import { startDaemon, type Daemon } from '../../../src/main.js';
import { generateServerKeyPair } from '../../../src/ssh/index.js';
import type { ServerRecord } from '../../../src/store/index.js';

export interface SshTestDaemon {
  daemon: Daemon;
  port: number;
  dataDir: string;
  logs: Record<string, unknown>[];
  stop(opts?: { keepDir?: boolean }): Promise<void>;
}

export async function startSshDaemon(opts: { dataDir?: string; ssh?: Record<string, unknown> } = {}): Promise<SshTestDaemon> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'rbx-ssh-'));
  const logs: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'debug', sink: (l) => logs.push(JSON.parse(l)) });
  const cfg = loadConfig({
    env: {},
    file: undefined,
    overrides: {
      dataDir,
      http: { host: '127.0.0.1', port: 0 },
      https: { host: '127.0.0.1', port: 0 },
      ssh: { host: '127.0.0.1', port: 0, ...opts.ssh },
      shutdownTimeout: '2s',
    },
  });
  const daemon = await startDaemon(cfg, log);
  return {
    daemon,
    port: daemon.ssh.port,
    dataDir,
    logs,
    async stop({ keepDir = false } = {}) {
      await daemon.stop();
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

/** Inserts a server record with a fresh key pair into the daemon's store. */
export function addServer(d: SshTestDaemon, slug: string, over: Partial<ServerRecord> = {}): TestServer {
  const id = `srv_${slug.replace(/-/g, '')}${++seq}`;
  const pair = generateServerKeyPair(id);
  const rec: ServerRecord = {
    id,
    accountId: 'acc_test',
    slug,
    sshPublicKey: pair.publicKey,
    keyFingerprint: pair.fingerprint,
    memoryBytes: 256 << 20,
    diskBytes: 256 << 20,
    neverSleep: false,
    suspended: false,
    flag: null,
    createdAt: Date.now(),
    ...over,
  };
  if (!d.daemon.store.servers.insert(rec)) throw new Error(`slug ${slug} taken`);
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

export const CLIENT_OPTS = ['-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes', '-F', '/dev/null'];

/** `ssh` arguments up to and including the destination. */
export function sshArgs(port: number, keyFile: string, extra: string[] = [], user = 'root'): string[] {
  return ['-p', String(port), '-i', keyFile, ...CLIENT_OPTS, ...extra, `${user}@127.0.0.1`];
}
