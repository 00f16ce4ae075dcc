// This host's identity on the channel: a certificate for its cluster name, signed by the cluster
// CA read from the registry and issued at start for a short life (LEAF_DAYS), reissued well
// before it ends (kept in memory only) on the same key pair, made once per run, whose public key
// (its SPKI SHA-256) the host registers in its hosts row. Both sides of the channel present one
// and accept only certificates of that CA; the name in a peer's certificate is the host it
// claims to be, and the owner's side takes it only with the key that host registered (owner-admit.ts).

import { createHash, generateKeyPairSync, type KeyObject } from 'node:crypto';
import type { PeerCertificate, TLSSocket } from 'node:tls';
import { issueLeaf, loadCa } from '../edge/index.js';
import type { CaPair } from '../registry/index.js';

const LEAF_DAYS = 2;
/** Reissued when this much of its life is left (the timer runs every REISSUE_MS). */
export const REISSUE_MS = 12 * 3600_000;

export interface KeyPair {
  publicKey: KeyObject;
  privateKey: KeyObject;
}

export interface Identity {
  /** The cluster CA's certificate: the only issuer either side accepts. */
  ca: string;
  cert: string;
  key: string;
  host: string;
  /** The SPKI SHA-256 (base64) of the certificate's public key: what the host registers. */
  keyId: string;
}

/** A new key pair for this run's channel certificates. */
export const channelKeyPair = (): KeyPair => generateKeyPairSync('ec', { namedCurve: 'P-256' });

/** The SPKI SHA-256 of a public key, base64. */
export const spkiHash = (pub: KeyObject): string =>
  createHash('sha256')
    .update(pub.export({ type: 'spki', format: 'der' }))
    .digest('base64');

export function issueIdentity(pair: CaPair, host: string, keys: KeyPair = channelKeyPair()): Identity {
  const leaf = issueLeaf(loadCa(pair.certPem, pair.keyPem, pair.name), [host], LEAF_DAYS, true, keys);
  return { ca: pair.certPem, cert: leaf.certPem, key: leaf.keyPem, host, keyId: spkiHash(keys.publicKey) };
}

/** The cluster host a verified peer certificate names (its common name). */
export function peerHost(cert: PeerCertificate | undefined): string | undefined {
  const cn = cert?.subject?.CN;
  return typeof cn === 'string' ? cn : Array.isArray(cn) ? cn[0] : undefined;
}

/** The SPKI SHA-256 of the certificate a TLS peer presented; undefined without one. */
export function peerKey(socket: TLSSocket): string | undefined {
  const x = socket.getPeerX509Certificate();
  return x && spkiHash(x.publicKey);
}
