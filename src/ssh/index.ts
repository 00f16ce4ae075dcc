// Public surface of the SSH front door (the only ssh2 user): the server Part for main.ts, the
// per-server key pair made at create time, and fingerprint helpers matching ServerRecord.
export { SshServer, startSsh, type SshDeps, type SshOptions } from './server.js';
export { generateServerKeyPair, fingerprintOf, fingerprintOfBlob, type ServerKeyPair } from './keys.js';
export { cryptoStatus, type CryptoStatus } from './algorithms.js';
export type { HostKey } from './hostkeys.js';
