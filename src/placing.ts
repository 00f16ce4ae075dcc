// What a host writes to the cluster's registry when a committed server runs on it: hosting asks
// for it (hosting/servers.ts `SharedNames.place`) and the registry does it (registry/keyednames.ts),
// neither importing the other, so the shape is declared here once for both.

export interface PlaceRequest {
  serverId: string;
  accountId: string;
  slug: string;
  publicIp: string;
  /** The server's SSH public key and its fingerprint, recorded beside its placement. */
  sshPublicKey?: string;
  keyFingerprint?: string;
  neverSleep?: boolean;
}
