// The API's objects as the SDK returns them: the document's fields in camelCase. The checks at
// the end make the compiler hold each type's keys to wire.ts's FIELDS (which the coverage test
// holds to the served OpenAPI document).

import type { FIELDS } from './wire.js';

export type Tier = 'anonymous' | 'verified' | 'paid';
export type ServerState = 'creating' | 'running' | 'sleeping' | 'waking' | 'stopped' | 'failed' | 'unavailable';

export interface Credits {
  tier: Tier;
  ramGbHoursLeft: number;
  egressGbLeft: number;
  balanceUsd: number;
  /** Bytes the account's checkpoints hold in the store (billed like disk). */
  checkpointBytes: number;
}

export interface ExposedPort {
  /** host:port */
  public: string;
  containerPort: number;
  protocol: 'tcp';
}

export interface ServerUsage {
  diskMbUsed: number | null;
  domains: string[];
}

/** A server as GET /servers/{id} answers it. */
export interface ServerInfo {
  id: string;
  /** The server's host name, `<slug>.<domain>`. */
  subdomain: string;
  state: ServerState;
  neverSleep: boolean;
  suspended: boolean;
  flag: string | null;
  exposedPorts: ExposedPort[];
  usage: ServerUsage;
  credits: Credits;
}

/** POST /create's answer: the server, how to reach it over SSH and (for a new account) its key. */
export interface Created extends ServerInfo {
  ssh: string;
  sshPrivateKey: string;
  apiKey?: string;
  subdomainNote?: string;
  accountNote?: string;
}

export interface ExecResult {
  /** Exit status; null when a signal ended the command. */
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** The JSON answer kept only the first hosting.exec.outputMax bytes of a stream (never when streamed). */
  truncated: boolean;
  timedOut: boolean;
  ms: number;
}

export interface FileEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits, octal. */
  mode: string;
  /** ISO 8601 */
  mtime: string;
}

export interface FileList {
  path: string;
  entries: FileEntry[];
  truncated: boolean;
}

export interface Written {
  path: string;
  size: number;
}

export interface Domain {
  domain: string;
  server: string;
  state: 'pending_dns' | 'issuing' | 'active' | 'failed';
  reason: string | null;
  records: { type: 'CNAME' | 'A' | 'AAAA' | 'TXT'; name: string; value: string }[];
  createdAt: string;
  checkedAt: string | null;
  activeAt: string | null;
}

export interface UsageEntry {
  kind: 'usage' | 'credit';
  server: string | null;
  /** ISO 8601 */
  from: string;
  to: string;
  ramGbHours: number;
  diskGbMonths: number;
  checkpointGbMonths: number;
  egressGb: number;
  /** Drawn from the balance (usage) or added to it (credit). */
  usd: number;
  source: string | null;
}

export interface UsagePage {
  entries: UsageEntry[];
  nextCursor: string | null;
}

export interface RechargeInfo {
  how: string;
  endpoint: string;
  method: 'POST';
  body: { usd: number };
  paymentsConfigured: boolean;
  verifyPhoneInstead?: string;
  credits?: Credits;
}

export interface RechargeResult {
  ok: true;
  creditedUsd: number;
  settlement: 'settled' | 'pending';
  detail: string;
  credits: Credits;
}

export interface LogEvent {
  at: string;
  source: 'supervisor' | 'rootbox';
  kind: 'started' | 'exited' | 'restarting' | 'changed' | 'oom_kill' | 'other';
  message: string;
  /** exited: the exit status */
  status?: number;
  /** restarting: seconds until run.sh starts again */
  inSeconds?: number;
}

export interface Logs {
  lines: string[];
  events: LogEvent[];
  oomKills: number;
}

export interface RotatedKey {
  apiKey: string;
  tier: Tier;
}

/** A checkpoint of a server: a point-in-time copy of its disk and settings (memory is not kept). */
export interface Checkpoint {
  /** ckp_… */
  id: string;
  serverId: string;
  /** ISO 8601 */
  createdAt: string;
  /** Bytes of the server's disk it holds. */
  sizeBytes: number;
  /** manual: asked for; auto: taken when the server went to sleep or on the interval. */
  kind: 'manual' | 'auto';
  comment?: string;
}

export interface CheckpointList {
  /** Newest first. */
  checkpoints: Checkpoint[];
}

/** POST /servers/{id}/restore's answer: the checkpoint the disk now is. */
export interface Restored {
  ok: true;
  checkpoint: Checkpoint;
}

// ── the compiler's check of these types against wire.ts ──────────────────────────────────────
type Camel<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;
type KeysOf<K extends keyof typeof FIELDS> = Camel<(typeof FIELDS)[K][number]>;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const agree = <T extends true>(t: T) => t;
agree<Same<keyof ServerInfo, KeysOf<'Server'>>>(true);
agree<Same<keyof ServerUsage, KeysOf<'Server.usage'>>>(true);
agree<Same<keyof Created, KeysOf<'CreateResponse'>>>(true);
agree<Same<keyof Credits, KeysOf<'Credits'>>>(true);
agree<Same<keyof ExposedPort, KeysOf<'ExposedPort'>>>(true);
agree<Same<keyof ExecResult, KeysOf<'ExecAnswer'>>>(true);
agree<Same<keyof FileList, KeysOf<'FileList'>>>(true);
agree<Same<keyof FileEntry, KeysOf<'FileList.entries[]'>>>(true);
agree<Same<keyof Written, KeysOf<'Written'>>>(true);
agree<Same<keyof Domain, KeysOf<'Domain'>>>(true);
agree<Same<keyof UsagePage, KeysOf<'UsagePage'>>>(true);
agree<Same<keyof UsageEntry, KeysOf<'UsagePage.entries[]'>>>(true);
agree<Same<keyof Domain['records'][number], KeysOf<'Domain.records[]'>>>(true);
agree<Same<keyof Logs, KeysOf<'GET /servers/{id}/logs'>>>(true);
agree<Same<keyof LogEvent, KeysOf<'GET /servers/{id}/logs.events[]'>>>(true);
agree<Same<keyof RotatedKey, KeysOf<'POST /account/rotate-key'>>>(true);
agree<Same<keyof RechargeInfo['body'], KeysOf<'RechargeInfo.body'>>>(true);
agree<Same<keyof RechargeInfo, KeysOf<'RechargeInfo'>>>(true);
agree<Same<keyof RechargeResult, KeysOf<'RechargeResult'>>>(true);
agree<Same<keyof Checkpoint, KeysOf<'Checkpoint'>>>(true);
agree<Same<keyof CheckpointList, KeysOf<'CheckpointList'>>>(true);
agree<Same<keyof Restored, KeysOf<'POST /servers/{id}/restore'>>>(true);
