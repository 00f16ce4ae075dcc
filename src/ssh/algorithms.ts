// What the SSH server offers: modern key exchange, host key, cipher and MAC algorithms only
// (no SHA-1, no CBC, no RSA/DSA host keys), and the check that ssh2's native crypto binding
// (sshcrypto.node: chacha20-poly1305 and AES-GCM) is really loaded — ssh2 falls back to slower
// JavaScript silently when it is missing, e.g. after a bundler inlined ssh2.

import { createRequire } from 'node:module';
import { AppError } from '../errors.js';

export const ALGORITHMS = {
  kex: [
    'curve25519-sha256',
    'curve25519-sha256@libssh.org',
    'ecdh-sha2-nistp256',
    'ecdh-sha2-nistp384',
    'ecdh-sha2-nistp521',
    'diffie-hellman-group16-sha512',
    'diffie-hellman-group18-sha512',
  ],
  serverHostKey: ['ssh-ed25519', 'ecdsa-sha2-nistp256'],
  cipher: ['chacha20-poly1305@openssh.com', 'aes128-gcm@openssh.com', 'aes256-gcm@openssh.com', 'aes128-ctr', 'aes192-ctr', 'aes256-ctr'],
  hmac: ['hmac-sha2-256-etm@openssh.com', 'hmac-sha2-512-etm@openssh.com', 'hmac-sha2-256', 'hmac-sha2-512'],
  compress: ['none', 'zlib@openssh.com'],
};

export interface CryptoStatus {
  /** ssh2's compiled binding is loaded (native chacha20-poly1305 / AES-GCM). */
  native: boolean;
  /** Where ssh2 was loaded from (node_modules path), to diagnose bundling mistakes. */
  from: string;
}

/** Asks the ssh2 that this process really uses whether its native binding loaded. */
export function cryptoStatus(): CryptoStatus {
  const req = createRequire(import.meta.url);
  const from = req.resolve('ssh2/lib/protocol/crypto.js');
  const mod = req(from) as { bindingAvailable?: boolean };
  return { native: mod.bindingAvailable === true, from };
}

/** Throws a clear error when the binding is missing; the SSH listener does not start without it. */
export function assertNativeCrypto(): CryptoStatus {
  const st = cryptoStatus();
  if (!st.native) {
    throw AppError.of(
      'ssh_crypto_not_native',
      `ssh2's native crypto binding is not loaded (${st.from}); rebuild it with \`npm rebuild ssh2\` (needs a C++ toolchain) — without it SSH is several times slower`,
    );
  }
  return st;
}
