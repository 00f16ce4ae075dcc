// What the SSH server is given (server.ts's SshServer): its \`ssh\` config slice, the servers it
// logs in to, the runtime and the idle tracker, and in cluster mode the way to servers of other
// hosts (\`Elsewhere\`: their keys, kept in memory, and a stream to their owner's SSH server).

import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '../log/index.js';
import type { Presence } from '../presence/index.js';
import type { Runtime } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';
import type { KeysElsewhere, ServerLookup } from './auth.js';

export interface SshOptions {
  host: string;
  port: number;
  dataDir: string;
  maxAuthFailures: number;
  authFailureWindow: number;
  loginGraceTime: number;
  maxUnauthenticatedPerAddress: number;
  maxUnauthenticated: number;
  maxChannels: number;
  maxExecs: number;
  maxExecsPerServer: number;
}

export interface SshDeps {
  options: SshOptions;
  servers: ServerLookup & { get(id: string): ServerRecord | undefined };
  /** The runtime and the idle tracker: both started before the SSH part. */
  runtime: Runtime;
  presence: Presence;
  log: Logger;
}

/** Cluster mode: servers of other hosts, reached through the host-to-host channel (relay.ts). */
export interface Elsewhere {
  /** The servers of other hosts whose key has this fingerprint (the registry's shared keys, kept in memory). */
  keys: KeysElsewhere;
  /** A stream to the owner's SSH server, authenticated for `serverId`; throws an AppError when there is none. */
  open(serverId: string, client: { ip: string; port: number }): Promise<Duplex>;
}

/** ssh2's connection holds its socket here (no public accessor). */
export type SockOf = { _sock?: Socket | Duplex };
