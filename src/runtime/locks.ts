// One daemon per set of host names. Two daemons with the same bridge, nft table, subnet, uid
// range, exposed-port pool, metrics port or data dir break each other silently (the second one's
// reconcile removes the first one's veths), so a daemon claims them at start and refuses to start
// when another live daemon holds any of them.
//
// The claim lives in flock(2) locks under /run/rootbox/locks, held by a small helper process
// (native/rbx-lock.c: Node has no flock) for the daemon's lifetime: `bridge-<name>.lock`,
// `nft-<name>.lock`, `data-<hash of the data dir>.lock`. A lock goes with the process that holds
// it, so a daemon killed with -9 leaves nothing stale (its helper ends at the end of its stdin and
// by PR_SET_PDEATHSIG). Each lock file holds the holder's record (pid and settings): ranges (uid
// range, subnet, port pool) and the metrics port are checked for overlap against the records of
// the live holders the helper reports, one daemon's check at a time (the helper's start.lock).

import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { nativeBinary, notBuilt } from './native.js';

export const LOCK_DIR = '/run/rootbox/locks';

/** What a daemon claims on the host (the settings named in a refusal). */
export interface HostClaims {
  dataDir: string;
  bridge: string;
  nftTable: string;
  subnet: string;
  /** First and last host uid of the uid ranges. */
  uids: [number, number];
  /** hosting.portPool, `first-last`; absent when no hosting API runs. */
  portPool?: string;
  /** metrics.listen (`host:port`, or off). */
  metrics?: string;
}

interface Record_ extends HostClaims {
  pid: number;
  /** This claim's own id (one process may run more than one daemon: tests do). */
  claim: string;
}

export interface HostLock {
  readonly names: string[];
  /** Lets the locks go (the daemon's stop). */
  release(): Promise<void>;
  /** Called when the helper ended while the daemon still ran (someone killed it). */
  onLost(fn: () => void): void;
}

/** What a daemon of these settings claims on the host. */
export function hostClaims(cfg: Pick<Config, 'dataDir' | 'runtime'> & Partial<Pick<Config, 'hosting' | 'metrics'>>): HostClaims {
  const r = cfg.runtime;
  return {
    dataDir: resolve(cfg.dataDir),
    bridge: r.bridge,
    nftTable: r.nftTable,
    subnet: r.subnet,
    uids: [r.uidStart, r.uidStart + r.uidRanges * 65536 - 1],
    portPool: cfg.hosting?.portPool,
    metrics: cfg.metrics?.listen,
  };
}

/** The lock names of a claim set. */
export function lockNames(c: HostClaims): string[] {
  const dir = existsSync(c.dataDir) ? realpathSync(c.dataDir) : c.dataDir;
  return [`data-${createHash('sha256').update(dir).digest('hex').slice(0, 16)}`, `bridge-${c.bridge}`, `nft-${c.nftTable}`];
}

const SETTING: Record<string, string> = { data: 'dataDir', bridge: 'runtime.bridge', nft: 'runtime.nftTable' };

const ipInt = (ip: string) => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
function subnetRange(cidr: string): [number, number] {
  const [ip, len] = cidr.split('/');
  const size = 2 ** (32 - Number(len));
  const base = Math.floor(ipInt(ip) / size) * size;
  return [base, base + size - 1];
}
const portRange = (p: string): [number, number] => p.split('-').map(Number) as [number, number];
const overlap = (a: [number, number], b: [number, number]) => a[0] <= b[1] && b[0] <= a[1];
/** A listen address as host and port (`off`: none); `[::1]:9464` keeps its brackets off. */
function listenOf(listen?: string): { host: string; port: number } | undefined {
  if (!listen || listen === 'off') return undefined;
  const at = listen.lastIndexOf(':');
  const port = Number(listen.slice(at + 1));
  return port ? { host: listen.slice(0, Math.max(at, 0)).replace(/^\[|\]$/g, ''), port } : undefined;
}
const WILDCARD = new Set(['', '0.0.0.0', '::', '*']);
/** Whether two listen addresses take the same socket: the same port on the same address, or on any address when one is a wildcard. */
export function sameListen(a?: string, b?: string): boolean {
  const x = listenOf(a);
  const y = listenOf(b);
  return !!x && !!y && x.port === y.port && (x.host === y.host || WILDCARD.has(x.host) || WILDCARD.has(y.host));
}

/** The settings of `mine` that clash with another daemon's record (as `setting value` phrases). */
export function clashes(mine: HostClaims, other: HostClaims): string[] {
  const out: string[] = [];
  if (mine.dataDir === other.dataDir) out.push(`dataDir ${mine.dataDir}`);
  if (mine.bridge === other.bridge) out.push(`runtime.bridge ${mine.bridge}`);
  if (mine.nftTable === other.nftTable) out.push(`runtime.nftTable ${mine.nftTable}`);
  if (overlap(subnetRange(mine.subnet), subnetRange(other.subnet))) out.push(`runtime.subnet ${mine.subnet} (ours ${mine.subnet}, theirs ${other.subnet})`);
  if (overlap(mine.uids, other.uids)) out.push(`runtime.uidStart ${mine.uids[0]} (our uids ${mine.uids.join('-')}, theirs ${other.uids.join('-')})`);
  if (mine.portPool && other.portPool && overlap(portRange(mine.portPool), portRange(other.portPool)))
    out.push(`hosting.portPool ${mine.portPool} (ours ${mine.portPool}, theirs ${other.portPool})`);
  if (sameListen(mine.metrics, other.metrics)) out.push(`metrics.listen ${mine.metrics} (ours ${mine.metrics}, theirs ${other.metrics})`);
  return out;
}

function readRecord(dir: string, name: string): Record_ | undefined {
  try {
    const r = JSON.parse(readFileSync(join(dir, `${name}.lock`), 'utf8')) as Record_;
    return typeof r.pid === 'number' ? r : undefined;
  } catch {
    return undefined;
  }
}

const refusal = (pid: number | string, dataDir: string | undefined, what: string[]) =>
  AppError.of(
    'host_names_taken',
    `another rootbox daemon (pid ${pid}${dataDir ? `, data dir ${dataDir}` : ''}) holds ${what.join(', ')}; stop it or give this daemon other names (runtime.bridge, runtime.nftTable, runtime.subnet, runtime.uidStart, hosting.portPool, metrics.listen, dataDir)`,
  );

/** Reads the helper's stdout until its "held" line or its end. */
function firstLines(child: ChildProcess): Promise<{ lines: string[]; code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    const done = (code: number | null) => resolve({ lines: out.split('\n').filter(Boolean), code, stderr: err });
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (/(^|\n)held\n/.test(out)) done(null);
    });
    child.once('close', (code) => done(code ?? -1));
    child.once('error', (e) => ((err += e.message), done(-1)));
  });
}

/**
 * Claims the host names for this process; throws `host_names_taken` naming the holder's pid and
 * the conflicting settings when another live daemon holds any of them.
 */
export async function lockHost(claims: HostClaims, dir = LOCK_DIR, only?: 'data'): Promise<HostLock> {
  const bin = nativeBinary('rbx-lock');
  if (!bin.built) throw AppError.of('helper_missing', `the lock helper is not built: ${notBuilt(bin)}`);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
  } catch (e) {
    throw AppError.of('lock_failed', `cannot make ${dir}: ${(e as Error).message}`);
  }
  const names = only ? lockNames(claims).slice(0, 1) : lockNames(claims);
  const child = spawn(bin.path, [dir, ...names], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdin!.on('error', () => {});
  const { lines, code, stderr } = await firstLines(child);
  const end = () => new Promise<void>((r) => (child.exitCode !== null || child.signalCode ? r() : (child.once('close', () => r()), child.stdin!.end())));
  if (code === 3) {
    const busy = (lines.find((l) => l.startsWith('busy ')) ?? '').slice(5).split(' ');
    const holder = busy.map((n) => readRecord(dir, n)).find(Boolean);
    throw refusal(
      holder?.pid ?? 'unknown',
      holder?.dataDir,
      busy.map((n) => `${SETTING[n.split('-')[0]] ?? n} ${n.slice(n.indexOf('-') + 1)}`),
    );
  }
  if (code !== null) throw AppError.of('lock_failed', `the lock helper failed (exit ${code}): ${stderr.trim().slice(0, 300)}`);
  const record: Record_ = { ...claims, pid: process.pid, claim: randomUUID() };
  const others = new Map<string, Record_>();
  for (const l of lines) {
    const r = l.startsWith('live ') ? readRecord(dir, l.slice(5)) : undefined;
    if (r) others.set(r.claim ?? String(r.pid), r);
  }
  for (const o of only ? [] : others.values()) {
    const what = clashes(claims, o);
    if (what.length) {
      await end();
      throw refusal(o.pid, o.dataDir, what);
    }
  }
  for (const n of names) writeFileSync(join(dir, `${n}.lock`), JSON.stringify(record) + '\n');
  child.stdin!.write('go\n');
  let released = false;
  let lost = () => {};
  child.once('close', () => released || lost());
  return {
    names,
    async release() {
      released = true;
      await end();
    },
    onLost(fn) {
      lost = fn;
    },
  };
}

/** Claims only a data dir (its daemon's lock), for a command that builds one (restore
 *  --from-backup): refused while a daemon or another such command holds it. */
export function lockDataDir(dataDir: string, dir = LOCK_DIR): Promise<HostLock> {
  const none = { bridge: '', nftTable: '', subnet: '255.255.255.255/32', uids: [-1, -1] as [number, number] };
  return lockHost({ dataDir: resolve(dataDir), ...none }, dir, 'data');
}

/**
 * Live daemons whose claims clash with `claims`, for doctor. A live holder with the same data dir
 * is the daemon this config runs (not a conflict); any other clash is.
 */
export async function hostConflicts(claims: HostClaims, dir = LOCK_DIR): Promise<{ pid: number; dataDir: string; clashes: string[] }[]> {
  const bin = nativeBinary('rbx-lock');
  if (!bin.built || !existsSync(dir)) return [];
  const child = spawn(bin.path, [dir], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdin!.on('error', () => {});
  const { lines } = await firstLines(child);
  child.stdin!.end();
  const out = new Map<string, { pid: number; dataDir: string; clashes: string[] }>();
  for (const l of lines) {
    const r = l.startsWith('live ') ? readRecord(dir, l.slice(5)) : undefined;
    if (!r || out.has(r.claim) || r.dataDir === claims.dataDir) continue;
    const what = clashes(claims, r);
    if (what.length) out.set(r.claim, { pid: r.pid, dataDir: r.dataDir, clashes: what });
  }
  return [...out.values()];
}

/** doctor's row: another live daemon on this config's names (required: this daemon would not start). */
export async function hostNamesCheck(cfg: Pick<Config, 'dataDir' | 'runtime'> & Partial<Pick<Config, 'hosting' | 'metrics'>>) {
  const found = await hostConflicts(hostClaims(cfg));
  const detail = found.length
    ? found.map((f) => `daemon pid ${f.pid} (data dir ${f.dataDir}) holds ${f.clashes.join(', ')}`).join('; ')
    : `no other live daemon holds bridge ${cfg.runtime.bridge}, nft table ${cfg.runtime.nftTable}, subnet ${cfg.runtime.subnet}, these uids, port pool or data dir`;
  const fix = 'stop that daemon, or give this one other runtime.bridge, runtime.nftTable, runtime.subnet, runtime.uidStart, hosting.portPool, metrics.listen';
  return { name: 'host names', required: true, ok: found.length === 0, detail, fix };
}
