// This host's identity on the channel: a certificate for its cluster name, signed by the cluster
// CA read from the registry and issued at start for a short life (LEAF_DAYS), reissued well
// before it ends (kept in memory only). Both sides of the channel present one and accept only
// certificates of that CA; the name in a peer's certificate is the host it is.

import type { PeerCertificate } from 'node:tls';
import { issueLeaf, loadCa } from '../edge/index.js';
import type { CaPair } from '../registry/index.js';

const LEAF_DAYS = 2;
/** Reissued when this much of its life is left (the timer runs every REISSUE_MS). */
export const REISSUE_MS = 12 * 3600_000;

export interface Identity {
  /** The cluster CA's certificate: the only issuer either side accepts. */
  ca: string;
  cert: string;
  key: string;
  host: string;
}

export function issueIdentity(pair: CaPair, host: string): Identity {
  const leaf = issueLeaf(loadCa(pair.certPem, pair.keyPem, pair.name), [host], LEAF_DAYS, true);
  return { ca: pair.certPem, cert: leaf.certPem, key: leaf.keyPem, host };
}

/** The cluster host a verified peer certificate names (its common name). */
export function peerHost(cert: PeerCertificate | undefined): string | undefined {
  const cn = cert?.subject?.CN;
  return typeof cn === 'string' ? cn : Array.isArray(cn) ? cn[0] : undefined;
}
