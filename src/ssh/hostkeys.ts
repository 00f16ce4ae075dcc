// The daemon's SSH host keys: ed25519 and ecdsa-sha2-nistp256, generated once under
// <dataDir>/ssh and reused on every start so clients never see the host key change. A key file
// that exists but does not parse is an error (regenerating it would silently change the key).

import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { AppError } from '../errors.js';
import { fingerprintOf, generateKeyPair } from './keys.js';

export interface HostKey {
  type: 'ssh-ed25519' | 'ecdsa-sha2-nistp256';
  /** Private key in OpenSSH format, as ssh2's server takes it. */
  privateKey: string;
  publicKey: string;
  /** `SHA256:…` as `ssh-keygen -l` prints it. */
  fingerprint: string;
  path: string;
}

const KINDS = [
  { type: 'ssh-ed25519', file: 'ssh_host_ed25519_key', gen: () => generateKeyPair('ed25519', 'rootbox') },
  { type: 'ecdsa-sha2-nistp256', file: 'ssh_host_ecdsa_key', gen: () => generateKeyPair('ecdsa', 'rootbox') },
] as const;

function writeAtomic(path: string, data: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data, { mode });
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}

function load(path: string, type: string): { privateKey: string; publicKey: string } {
  const privateKey = readFileSync(path, 'utf8');
  const parsed = ssh2.utils.parseKey(privateKey);
  if (parsed instanceof Error || Array.isArray(parsed) || parsed.type !== type || !parsed.isPrivateKey()) {
    throw AppError.of(
      'ssh_host_key_invalid',
      `SSH host key ${path} is not a readable ${type} private key; fix or remove it (removing it changes the host key clients have pinned)`,
    );
  }
  const publicKey = `${type} ${parsed.getPublicSSH().toString('base64')} rootbox`;
  return { privateKey, publicKey };
}

/** Loads the host keys from `<dataDir>/ssh`, creating the missing ones (mode 0600, dir 0700). */
export function loadHostKeys(dataDir: string): HostKey[] {
  const dir = join(dataDir, 'ssh');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  return KINDS.map((k) => {
    const path = join(dir, k.file);
    if (!existsSync(path)) {
      const pair = k.gen();
      writeAtomic(path, pair.private.endsWith('\n') ? pair.private : pair.private + '\n', 0o600);
      writeAtomic(`${path}.pub`, pair.public.trim() + '\n', 0o644);
    }
    const { privateKey, publicKey } = load(path, k.type);
    return { type: k.type, privateKey, publicKey, fingerprint: `SHA256:${fingerprintOf(publicKey)}`, path };
  });
}
