// Per-server SSH key pairs and fingerprints. A server's key pair is made once at create time:
// the private key (OpenSSH format, accepted by `ssh -i` and `ssh-keygen -y`) is handed to the
// caller and never stored; the public key line and its fingerprint are kept in the ServerRecord.

import { createHash } from 'node:crypto';
import ssh2 from 'ssh2';

export interface ServerKeyPair {
  /** `-----BEGIN OPENSSH PRIVATE KEY-----` block, unencrypted, with a trailing newline. */
  privateKey: string;
  /** OpenSSH public key line: `ssh-ed25519 AAAA… <comment>`. */
  publicKey: string;
  /** SHA256 of the public key blob, base64 without padding (as in ServerRecord.keyFingerprint). */
  fingerprint: string;
}

/** SHA256 fingerprint of a raw public key blob, base64 without `=` padding, no `SHA256:` prefix. */
export function fingerprintOfBlob(blob: Buffer): string {
  return createHash('sha256').update(blob).digest('base64').replace(/=+$/, '');
}

/** The wire blob of an OpenSSH public key line (`<type> <base64> [comment]`); null when malformed. */
export function publicKeyBlob(line: string): Buffer | null {
  const parts = line.trim().split(/\s+/);
  if (parts.length < 2 || !/^[A-Za-z0-9+/]+={0,2}$/.test(parts[1])) return null;
  const blob = Buffer.from(parts[1], 'base64');
  // The blob starts with the key type as an SSH string; it must match the line's first field.
  if (blob.length < 4) return null;
  const n = blob.readUInt32BE(0);
  if (n > blob.length - 4 || blob.subarray(4, 4 + n).toString('latin1') !== parts[0]) return null;
  return blob;
}

/** Fingerprint of an OpenSSH public key line; null when the line is not a public key. */
export function fingerprintOf(line: string): string | null {
  const blob = publicKeyBlob(line);
  return blob ? fingerprintOfBlob(blob) : null;
}

/**
 * A key pair from ssh2's generator that ssh2 (and OpenSSH) can read back. ssh2 strips leading
 * zero bytes from an ed25519 public key (mscdex/ssh2#1390, #1513), so about one pair in 256 comes
 * out with a 31-byte key that ssh, ssh-keygen and ssh2 itself refuse; such a pair is made again.
 */
export function generateKeyPair(type: 'ed25519' | 'ecdsa', comment: string): { private: string; public: string } {
  for (let attempt = 0; attempt < 16; attempt++) {
    const pair = type === 'ed25519' ? ssh2.utils.generateKeyPairSync('ed25519', { comment }) : ssh2.utils.generateKeyPairSync('ecdsa', { bits: 256, comment });
    const priv = ssh2.utils.parseKey(pair.private);
    const pub = ssh2.utils.parseKey(pair.public);
    if (priv instanceof Error || Array.isArray(priv) || !priv.isPrivateKey()) continue;
    if (pub instanceof Error || Array.isArray(pub) || !pub.getPublicSSH().equals(priv.getPublicSSH())) continue;
    return pair;
  }
  throw new Error(`ssh2 made no readable ${type} key pair in 16 attempts`);
}

/**
 * A fresh ed25519 key pair for a new server. `comment` ends up in both the public key line and
 * the private key block (use the server id); it must be a single line of printable text.
 */
export function generateServerKeyPair(comment: string): ServerKeyPair {
  const safe = comment.replace(/[^\x21-\x7e]/g, '').slice(0, 64);
  const pair = generateKeyPair('ed25519', safe);
  const publicKey = pair.public.trim();
  const fingerprint = fingerprintOf(publicKey);
  if (!fingerprint) throw new Error('ssh2 produced a public key line that does not parse');
  const privateKey = pair.private.endsWith('\n') ? pair.private : pair.private + '\n';
  return { privateKey, publicKey, fingerprint };
}
